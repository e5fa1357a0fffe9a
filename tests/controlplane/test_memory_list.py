"""The memory list's output path: the serializer's direct representation, of a list's row or of
a memory, equals DRF's generic one of the memory field for field; a page costs the same queries
whatever its size; pages count and stop where the list does."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from automemory.models import MemorySourceTask
from controlplane.api.serializers import MemoryOutput
from controlplane.models import IdentityMemory, MemorySource, MemoryStatus
from controlplane.selectors import memory_list
from tests.controlplane.helpers import page_read


@pytest.fixture
def varied_memories(project, alice, bob, memory_factory, task_factory):
    """One of every shape the list shows: manual, auto with several sources, flagged and
    approved, archived, superseded, an author since deleted, odd microseconds."""
    first, second, third = (task_factory(project, alice) for _ in range(3))
    auto = memory_factory(
        project=project,
        source=MemorySource.AUTO,
        source_task=first,
        flagged=True,
        instruction_flags=["role_markup", "imperative"],
        approved_at=datetime(2026, 11, 30, 16, 5, 1, 123456, tzinfo=UTC),
        approved_by=bob,
        injection_count=3,
        last_injected_at=timezone.now() - timedelta(days=2),
    )
    MemorySourceTask.objects.create(memory=auto, task=third, merged=True)
    MemorySourceTask.objects.create(
        memory=auto, task=second, merged=True, created_at=timezone.now() - timedelta(days=9)
    )
    newer = memory_factory(project=project, content="Deploys go through make.", created_by=bob)
    memory_factory(
        project=project, status=MemoryStatus.SUPERSEDED, superseded_by=newer, created_by=None
    )
    memory_factory(
        project=project,
        status=MemoryStatus.ARCHIVED,
        archived_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        content='Ünïcödé — and "quotes" and\nnew lines',
    )
    memory_factory(user=alice, content="Alice prefers tabs.")
    return project


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/St_Johns"])
def test_the_direct_representation_is_drf_s_generic_one(varied_memories, alice, zone):
    rows = [
        *MemoryOutput.rows(memory_list(project=varied_memories, user=alice)),
        *MemoryOutput.rows(memory_list(user=alice)),
    ]
    assert len(rows) == 5
    serializer = MemoryOutput()
    with timezone.override(zone):
        for row in rows:
            memory = IdentityMemory.objects.get(pk=row["id"])
            generic = serializers.ModelSerializer.to_representation(serializer, memory)
            for direct in (MemoryOutput(row).data, MemoryOutput(memory).data):
                assert direct == generic
                assert list(direct) == list(generic)  # the same order too


def test_the_api_lists_them_as_before(api_client_for, alice, varied_memories):
    body = api_client_for(alice).get(f"/projects/{varied_memories.pk}/memories").json()
    auto = next(row for row in body["results"] if row["source"] == "auto")
    assert len(auto["source_task_ids"]) == 3
    assert auto["source_thread_id"] == auto["source_task_ids"][1]  # the merged one is older
    assert auto["approved_at"] == "2026-11-30T16:05:01.123456Z"
    assert auto["approved_by"] == "bob"
    assert auto["awaiting_approval"] is False
    assert {row["created_by"] for row in body["results"]} == {"alice", "bob", None}


@pytest.mark.parametrize("page_size", [1, 50, 200])
def test_a_page_is_three_queries_whatever_its_size(
    api_client_for, alice, project, memory_factory, task_factory, page_size
):
    """The token, the project with the caller's role, and the page: its rows, their authors'
    names, their source tasks and the list's total in one statement."""
    sources = {}
    for number in range(60):
        task = task_factory(project, alice) if number % 3 == 0 else None
        memory = memory_factory(
            project=project,
            source=MemorySource.AUTO if task else MemorySource.MANUAL,
            source_task=task,
            goal_key=f"goal {number}" if task else "",
            approved_by=alice if number % 2 else None,
        )
        sources[memory.pk] = []
        if task:
            merged = task_factory(project, alice)
            MemorySourceTask.objects.create(memory=memory, task=merged, merged=True)
            sources[memory.pk] = [task.pk, merged.pk]
    client = api_client_for(alice)
    url = f"/projects/{project.pk}/memories?page_size={page_size}"
    body, statements = page_read(client, url)
    assert len(body["results"]) == min(page_size, 60)
    assert body["count"] == 60
    assert len(statements) == 3, statements
    assert {row["id"]: row["source_task_ids"] for row in body["results"]} == {
        row["id"]: sources[row["id"]] for row in body["results"]
    }


def test_pages_count_the_filtered_list_and_stop_at_the_last(
    api_client_for, alice, project, memory_factory
):
    for number in range(7):
        archived = {"status": MemoryStatus.ARCHIVED, "archived_at": timezone.now()}
        memory_factory(project=project, **(archived if number < 2 else {}))
    client = api_client_for(alice)
    url = f"/projects/{project.pk}/memories?status=active&page_size=2"

    pages = [client.get(f"{url}&page={number}").json() for number in (1, 2, 3)]
    past = client.get(f"{url}&page=4")
    far = client.get(f"{url}&page=4611686018427387904")

    assert [page["count"] for page in pages] == [5, 5, 5]
    assert [len(page["results"]) for page in pages] == [2, 2, 1]
    assert pages[0]["previous"] is None and pages[2]["next"] is None
    assert "page=3" in pages[1]["next"] and pages[1]["previous"]
    seen = [row["id"] for page in pages for row in page["results"]]
    assert len(set(seen)) == 5
    assert past.status_code == far.status_code == 400
    assert past.json() == {"page": ["No page 4: the last page is 3."]}
    assert "the last page is 3" in far.json()["page"][0]


def test_an_empty_list_is_one_empty_page(api_client_for, alice, project):
    body = api_client_for(alice).get(f"/projects/{project.pk}/memories").json()

    assert body == {"count": 0, "next": None, "previous": None, "results": []}
    assert api_client_for(alice).get(f"/projects/{project.pk}/memories?page=2").status_code == 400
