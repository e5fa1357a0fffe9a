"""Prepared list pages (`controlplane.api.prepared`): a page read through the statement built
once per shape equals the page read the plain way, for every caller, filter and page; one
caller's values never reach another's page; a shape whose values would not be bound as plain
parameters is read the plain way."""

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automemory.api.views import EXTRACTION_LOG, MEMORY_FEEDBACK
from automemory.models import FeedbackKind, FeedbackVia, MemoryFeedback
from controlplane.api import prepared
from controlplane.api.memory_serializers import MemoryOutput
from controlplane.api.pagination import page_with_total
from controlplane.api.views import MY_MEMORIES, PROJECT_MEMORIES, PROJECT_TASKS
from controlplane.models import IdentityMemory, MemoryStatus, MemoryVisibility
from controlplane.selectors import memory_list


@pytest.fixture
def two_projects(project_factory, alice, bob, vera, memory_factory, task_factory):
    """Two projects with memories of every status and source, some held for their author,
    and tasks of every status, so each caller's page differs."""
    first = project_factory(alice, "first", members=[bob], viewers=[vera])
    second = project_factory(bob, "second", members=[alice])
    for project, authors in ((first, (alice, bob, vera)), (second, (bob, alice))):
        for number in range(7):
            author = authors[number % len(authors)]
            memory_factory(
                project=project,
                user=author,
                content=f"{project.name} fact {number} about deploys",
                status=MemoryStatus.ARCHIVED if number == 3 else MemoryStatus.ACTIVE,
                **({"archived_at": "2026-01-02T03:04:05Z"} if number == 3 else {}),
                visibility=(MemoryVisibility.AUTHOR if number % 3 == 0 else "project"),
            )
            task_factory(project, author, completed=number % 2 == 0)
    for user in (alice, bob):
        memory_factory(user=user, content=f"{user.username} prefers tabs")
    return first, second


def _page(object_list, number, size) -> list[dict]:
    """Page `number` of `object_list` (a queryset or a bound prepared list) as the API's
    pagination reads it; a page past the end is empty."""

    class Paginator:
        per_page = size

        def validate_number(self, number):
            return number

    paginator = Paginator()
    paginator.object_list = object_list
    return list(page_with_total(paginator, number).object_list)


def _plain_page(listed, values, number, size):
    """The page read without the prepared statement."""
    return _page(listed.build(**values), number, size)


def _prepared_page(listed, values, number, size):
    return _page(listed.bind(**values), number, size)


@pytest.mark.parametrize("size", [1, 2, 50])
def test_a_prepared_page_is_the_plain_page_for_every_caller_and_filter(
    two_projects, alice, bob, vera, size
):
    first, second = two_projects
    cases = []
    for user in (alice, bob, vera):
        for project in (first, second):
            for filters in ({}, {"status": "active"}, {"source": "manual"}, {"q": "fact 1"}):
                cases.append(
                    (PROJECT_MEMORIES, {"user_id": user.pk, "project_id": project.pk, **filters})
                )
            for filters in ({}, {"status": "completed"}, {"status": "queued"}):
                cases.append(
                    (PROJECT_TASKS, {"user_id": user.pk, "project_id": project.pk, **filters})
                )
        cases.append((MY_MEMORIES, {"user_id": user.pk}))
        cases.append((EXTRACTION_LOG, {"user_id": user.pk}))
    for listed, values in cases:
        for number in (1, 2, 9):
            plain = _plain_page(listed, values, number, size)
            assert _prepared_page(listed, values, number, size) == plain, (values, number)
    # The memory pages differ between callers (an author's held memories), so equal pages
    # above are each caller's own, not one cached answer.
    mine = _prepared_page(PROJECT_MEMORIES, {"user_id": alice.pk, "project_id": first.pk}, 1, 50)
    theirs = _prepared_page(PROJECT_MEMORIES, {"user_id": bob.pk, "project_id": first.pk}, 1, 50)
    assert {row["id"] for row in mine} != {row["id"] for row in theirs}


def test_one_caller_s_values_never_reach_another_s_page(api_client_for, two_projects, alice, bob):
    first, _ = two_projects
    held_for_alice = set(
        IdentityMemory.objects.filter(
            project=first, visibility=MemoryVisibility.AUTHOR, created_by=alice
        ).values_list("id", flat=True)
    )
    assert held_for_alice
    for _ in range(3):  # alternate, so each reads the shape the other prepared
        alices = api_client_for(alice).get(f"/projects/{first.pk}/memories").json()["results"]
        bobs = api_client_for(bob).get(f"/projects/{first.pk}/memories").json()["results"]
        assert held_for_alice <= {row["id"] for row in alices}
        assert not held_for_alice & {row["id"] for row in bobs}


@pytest.mark.django_db(transaction=True)
def test_callers_in_threads_each_get_their_own_page(two_projects, alice, bob):
    """The statement is shared by a process's threads; the values are each call's."""
    first, second = two_projects
    expected = {
        (user.pk, project.pk): _plain_page(
            PROJECT_MEMORIES, {"user_id": user.pk, "project_id": project.pk}, 1, 50
        )
        for user in (alice, bob)
        for project in (first, second)
    }
    failures = []

    def read(key):
        try:
            for _ in range(20):
                rows = _prepared_page(
                    PROJECT_MEMORIES, {"user_id": key[0], "project_id": key[1]}, 1, 50
                )
                if rows != expected[key]:
                    failures.append(key)
        finally:
            connection.close()

    if connection.vendor == "sqlite":
        pytest.skip("an in-memory SQLite test database is not shared with other threads")
    threads = [threading.Thread(target=read, args=(key,)) for key in expected]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_prepared_page_is_one_statement(two_projects, alice):
    first, _ = two_projects
    values = {"user_id": alice.pk, "project_id": first.pk}
    _prepared_page(PROJECT_MEMORIES, values, 1, 50)  # prepares the shape
    with CaptureQueriesContext(connection) as captured:
        rows = _prepared_page(PROJECT_MEMORIES, values, 1, 50)
    assert rows and len(captured.captured_queries) == 1
    assert any(statement is not None for statement in PROJECT_MEMORIES._statements.values())


def test_a_search_is_read_the_plain_way(two_projects, alice):
    """`q` lands inside a LIKE pattern: that shape is not prepared, and its page is right."""
    first, _ = two_projects
    values = {"user_id": alice.pk, "project_id": first.pk, "q": "fact 2"}
    rows = _prepared_page(PROJECT_MEMORIES, values, 1, 50)
    assert [row["content"] for row in rows] == ["first fact 2 about deploys"]
    prepared_shapes = PROJECT_MEMORIES._statements
    assert any(key for key, statement in prepared_shapes.items() if statement is None)


def test_a_value_written_into_the_sql_text_is_not_prepared(two_projects, alice, bob):
    listed = prepared.PreparedList(
        lambda user_id: (
            IdentityMemory.objects.extra(where=[f"created_by_id = {int(user_id)}"])  # in the text
            .values("id")
            .order_by("id")
        )
    )
    for user in (alice, bob, alice):
        expected = list(IdentityMemory.objects.filter(created_by=user).values("id").order_by("id"))
        assert _prepared_page(listed, {"user_id": user.pk}, 1, 200) == [
            {"id": row["id"], "pagination_total": len(expected)} for row in expected
        ]
    assert set(listed._statements.values()) == {None}


def test_a_value_of_another_type_is_read_the_plain_way(two_projects, alice):
    listed = prepared.PreparedList(
        lambda ids: IdentityMemory.objects.filter(pk__in=ids).values("id").order_by("id")
    )
    some = list(IdentityMemory.objects.values_list("id", flat=True)[:3])
    rows = _prepared_page(listed, {"ids": some}, 1, 50)
    assert [row["id"] for row in rows] == sorted(some)
    assert set(listed._statements.values()) == {None}


def test_it_keeps_a_bounded_number_of_shapes(two_projects, alice, monkeypatch):
    monkeypatch.setattr(prepared, "MAX_SHAPES", 3)
    listed = prepared.PreparedList(
        lambda user_id: MemoryOutput.rows(memory_list(user=get_user_model()(pk=user_id)))
    )
    for size in range(1, 8):
        _prepared_page(listed, {"user_id": alice.pk}, 1, size)
    assert len(listed._statements) == 3


def test_the_feedback_list_is_prepared_too(two_projects, alice, task_factory):
    first, _ = two_projects
    memory = IdentityMemory.objects.filter(project=first).first()
    for _ in range(3):
        MemoryFeedback.objects.create(
            memory=memory,
            task=task_factory(first, alice),
            kind=FeedbackKind.CITE,
            via=FeedbackVia.MCP,
        )
    values = {"memory_id": memory.pk}
    assert _prepared_page(MEMORY_FEEDBACK, values, 1, 2) == _plain_page(
        MEMORY_FEEDBACK, values, 1, 2
    )
    assert len(_prepared_page(MEMORY_FEEDBACK, {**values, "kind": "report"}, 1, 2)) == 0


@pytest.mark.parametrize("falsy", ["", 0])
def test_a_falsy_value_is_read_the_plain_way(two_projects, alice, falsy):
    """A builder that tests its value (`if status:`) gets the same page whether the value is
    falsy or not, in either order."""

    def build(user_id, status):
        memories = IdentityMemory.objects.filter(created_by_id=user_id)
        if status:
            memories = memories.filter(status=status if isinstance(status, str) else "archived")
        return memories.values("id").order_by("id")

    listed = prepared.PreparedList(build)
    truthy = "archived" if isinstance(falsy, str) else 1
    for status in (truthy, falsy, truthy, falsy):
        values = {"user_id": alice.pk, "status": status}
        assert _prepared_page(listed, values, 1, 50) == _plain_page(listed, values, 1, 50)
    assert _prepared_page(listed, {"user_id": alice.pk, "status": falsy}, 1, 50)
