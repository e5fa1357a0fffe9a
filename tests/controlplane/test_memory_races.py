"""A memory is deleted once: concurrent requests on one memory through the API.

On PostgreSQL the requests run at once in threads (each with its own connection) against
committed rows; the loser of a race with a delete gets 404 and leaves no trace. The
sequential tests run on SQLite too.
"""

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.models import AuditEvent, IdentityMemory, MemoryStatus, MemoryVisibility

THREADS = 12


def race(calls: list[tuple[str, Callable[[], int]]]) -> dict[str, Counter]:
    """Run the labelled `calls` at once (one thread each, released together); each label's
    status codes (an exception counts as its repr, never as a success)."""
    start = threading.Barrier(len(calls))
    results: list[tuple[str, object]] = []

    def run(label: str, call: Callable[[], int]) -> None:
        try:
            start.wait(30)
            results.append((label, call()))
        except Exception as error:
            results.append((label, repr(error)))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=pair) for pair in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return {label: Counter(code for got, code in results if got == label) for label, _ in calls}


def audits(action: str, memory: IdentityMemory) -> int:
    return AuditEvent.objects.filter(action=action, target_id=memory.pk).count()


def delete_call(client, memory) -> Callable[[], int]:
    return lambda: client.delete(f"/memories/{memory.pk}").status_code


def post_call(client, memory, action: str) -> Callable[[], int]:
    return lambda: client.post(f"/memories/{memory.pk}/{action}").status_code


# --- Sequential (SQLite and PostgreSQL) ---------------------------------------------------------


def test_it_deletes_a_memory_once_then_answers_404(project, alice, memory_factory, api_client_for):
    memory = memory_factory(project=project)
    client = api_client_for(alice)

    first = client.delete(f"/memories/{memory.pk}")
    second = client.delete(f"/memories/{memory.pk}")

    assert (first.status_code, second.status_code) == (204, 404)
    assert audits("memory_deleted", memory) == 1


def test_it_answers_404_and_writes_nothing_when_the_memory_went_after_the_access_check(
    project, alice, memory_factory
):
    """The services lock the row: a memory deleted after the caller read it is 404 for a
    delete, an edit, an approval, a restore and a share, with no audit row."""
    from automemory.services.sharing import memory_share
    from controlplane.errors import NotFoundError
    from controlplane.services.memories import (
        memory_approve,
        memory_delete,
        memory_restore,
        memory_update,
    )

    memory = memory_factory(
        project=project,
        flagged=True,
        instruction_flags=["ignore previous instructions"],
        visibility=MemoryVisibility.AUTHOR,
        status=MemoryStatus.ARCHIVED,
        archived_at=timezone.now(),
    )
    stale = IdentityMemory.objects.get(pk=memory.pk)
    IdentityMemory.objects.filter(pk=memory.pk).delete()
    calls = {
        "memory_deleted": lambda: memory_delete(user=alice, memory=stale),
        "memory_updated": lambda: memory_update(user=alice, memory=stale, content="New text."),
        "memory_approved": lambda: memory_approve(user=alice, memory=stale),
        "memory_restored": lambda: memory_restore(user=alice, memory=stale),
        "memory_shared": lambda: memory_share(user=alice, memory=stale),
    }
    for action, call in calls.items():
        with pytest.raises(NotFoundError):
            call()
        assert audits(action, memory) == 0, action


@pytest.mark.parametrize(
    ("module", "name", "data"),
    [
        ("memory_views", "memory_delete", {}),
        ("memory_views", "memory_edit", {"content": "New text."}),
        ("memory_views", "memory_approve", {}),
        ("memory_views", "memory_restore", {}),
        ("review_views", "memory_share", {}),
        ("review_views", "memory_report", {"reason": "wrong"}),
    ],
)
def test_the_console_answers_404_when_the_memory_went_after_its_access_check(
    client, project, alice, memory_factory, monkeypatch, module, name, data
):
    from importlib import import_module

    from django.urls import reverse

    memory = memory_factory(
        project=project,
        user=alice,
        flagged=True,
        visibility=MemoryVisibility.AUTHOR,
        status=MemoryStatus.ARCHIVED,
        archived_at=timezone.now(),
    )
    stale = IdentityMemory.objects.get(pk=memory.pk)
    IdentityMemory.objects.filter(pk=memory.pk).delete()
    views = import_module(f"automemory.console.{module}")
    monkeypatch.setattr(views, "access_get", lambda getter, **kwargs: stale)
    client.force_login(alice)

    response = client.post(reverse(f"console:{name}", args=[memory.pk]), data)

    assert response.status_code == 404
    assert not AuditEvent.objects.filter(target_id=memory.pk).exists()


# --- Concurrent (PostgreSQL) ----------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_deletes_once_when_many_deletes_race(project, alice, memory_factory, api_client_for):
    memory = memory_factory(project=project)
    clients = [api_client_for(alice) for _ in range(THREADS)]

    codes = race([("delete", delete_call(client, memory)) for client in clients])["delete"]

    assert codes == Counter({204: 1, 404: THREADS - 1})
    assert audits("memory_deleted", memory) == 1
    assert not IdentityMemory.objects.filter(pk=memory.pk).exists()


def _race_against_deletes(clients, memory, other) -> tuple[Counter, Counter]:
    """Half the threads delete `memory`, half call `other(client)`; (delete codes, other
    codes)."""
    calls = [
        ("delete", delete_call(client, memory)) if index % 2 else ("other", other(client))
        for index, client in enumerate(clients)
    ]
    codes = race(calls)
    return codes["delete"], codes["other"]


def _assert_one_delete_and_no_trace_of_losers(deletes, others, memory, action, won: int):
    assert deletes == Counter({204: 1, 404: THREADS // 2 - 1}), deletes
    assert set(others) <= {won, 404, 409}, others
    assert audits("memory_deleted", memory) == 1
    # Whatever returned its success happened (before the delete); nothing else is audited.
    assert audits(action, memory) <= others[won]
    assert not IdentityMemory.objects.filter(pk=memory.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_shares_or_answers_404_when_shares_race_a_delete(
    project, bob, memory_factory, api_client_for
):
    memory = memory_factory(project=project, user=bob, visibility=MemoryVisibility.AUTHOR)
    clients = [api_client_for(bob) for _ in range(THREADS)]

    deletes, others = _race_against_deletes(
        clients, memory, lambda client: post_call(client, memory, "share")
    )

    _assert_one_delete_and_no_trace_of_losers(deletes, others, memory, "memory_shared", 200)
    assert others[200] <= 1 and audits("memory_shared", memory) == others[200]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_edits_or_answers_404_when_edits_race_a_delete(
    project, alice, memory_factory, api_client_for
):
    memory = memory_factory(project=project)
    clients = [api_client_for(alice) for _ in range(THREADS)]
    counter = iter(range(1000))

    def edit(client):
        text = f"Edited text number {next(counter)}."
        return lambda: (
            client.patch(f"/memories/{memory.pk}", {"content": text}, format="json").status_code
        )

    deletes, others = _race_against_deletes(clients, memory, edit)

    _assert_one_delete_and_no_trace_of_losers(deletes, others, memory, "memory_updated", 200)
    assert audits("memory_updated", memory) == others[200]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_approves_or_answers_404_when_approvals_race_a_delete(
    project, alice, memory_factory, api_client_for
):
    memory = memory_factory(project=project, report_hold_at=timezone.now(), report_count=1)
    clients = [api_client_for(alice) for _ in range(THREADS)]

    deletes, others = _race_against_deletes(
        clients, memory, lambda client: post_call(client, memory, "approve")
    )

    _assert_one_delete_and_no_trace_of_losers(deletes, others, memory, "memory_approved", 200)
    # One approval releases the hold; a later one finds nothing held (409), never a row.
    assert audits("memory_approved", memory) <= 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_restores_or_answers_404_when_restores_race_a_delete(
    project, alice, memory_factory, api_client_for
):
    memory = memory_factory(
        project=project, status=MemoryStatus.ARCHIVED, archived_at=timezone.now()
    )
    clients = [api_client_for(alice) for _ in range(THREADS)]

    deletes, others = _race_against_deletes(
        clients, memory, lambda client: post_call(client, memory, "restore")
    )

    _assert_one_delete_and_no_trace_of_losers(deletes, others, memory, "memory_restored", 200)
    assert audits("memory_restored", memory) <= 1
