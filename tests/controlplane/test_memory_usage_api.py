"""Usage shown by the API: a memory's counters and the memories injected into a task."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automemory.models import MemoryState
from controlplane.models import MemoryStatus

MEMORY_FIELDS = {
    "id",
    "scope",
    "project_id",
    "content",
    "source",
    "source_thread_id",
    "status",
    "superseded_by_id",
    "created_by",
    "created_at",
    "updated_at",
    "injection_count",
    "last_injected_at",
    "flagged",
    "instruction_flags",
    "awaiting_approval",
    "approved_at",
    "approved_by",
    "archived_at",
}


def test_a_memory_shows_its_usage(api_client_for, alice, project, memory_factory):
    memory = memory_factory(project=project, content="Deploys go through make deploy.")
    injected_at = timezone.now()
    MemoryState.objects.create(memory=memory, injection_count=3, last_injected_at=injected_at)
    response = api_client_for(alice).get(f"/memories/{memory.pk}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) >= MEMORY_FIELDS
    assert body["injection_count"] == 3
    assert body["last_injected_at"] == injected_at.isoformat().replace("+00:00", "Z")
    listed = api_client_for(alice).get(f"/projects/{project.pk}/memories").json()["results"]
    assert listed[0]["injection_count"] == 3


READ_STATUS = {"anonymous": 401, "stranger": 404, "viewer": 200, "member": 200, "owner": 200}


@pytest.mark.parametrize("role", sorted(READ_STATUS))
def test_who_sees_a_project_memory(role, user_for_role, api_client_for, project, memory_factory):
    memory = memory_factory(project=project)
    response = api_client_for(user_for_role[role]).get(f"/memories/{memory.pk}")
    assert response.status_code == READ_STATUS[role]


def test_a_user_memory_is_seen_by_its_user_only(api_client_for, alice, bob, memory_factory):
    memory = memory_factory(user=alice, content="Alice prefers tabs.")
    assert api_client_for(bob).get(f"/memories/{memory.pk}").status_code == 404
    assert api_client_for(alice).get(f"/memories/{memory.pk}").status_code == 200


@pytest.mark.parametrize("memory_id", ["0", "abc", "1.5", "99999999999999999999999"])
def test_an_unknown_memory_id_is_a_404(api_client_for, alice, memory_id):
    assert api_client_for(alice).get(f"/memories/{memory_id}").status_code == 404


def test_archived_memories_are_listed_with_the_status_filter(
    api_client_for, alice, project, memory_factory
):
    active = memory_factory(project=project, content="active one")
    archived = memory_factory(
        project=project,
        content="archived one",
        status=MemoryStatus.ARCHIVED,
        archived_at=timezone.now(),
    )
    client = api_client_for(alice)
    only_archived = client.get(f"/projects/{project.pk}/memories?status=archived").json()
    assert [row["id"] for row in only_archived["results"]] == [archived.pk]
    everything = client.get(f"/projects/{project.pk}/memories").json()
    assert {row["id"] for row in everything["results"]} == {active.pk, archived.pk}
    assert client.get(f"/projects/{project.pk}/memories?status=gone").status_code == 400


def test_a_memory_list_costs_the_same_whatever_its_length(
    api_client_for, alice, bob, project, memory_factory
):
    """No query per row (creators and approvers are joined)."""
    client = api_client_for(alice)

    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/projects/{project.pk}/memories").status_code == 200
        return len(captured.captured_queries)

    memory_factory(project=project, created_by=alice)
    queries_for_list()  # the token's first use is stamped once
    one = queries_for_list()
    for number in range(8):
        memory_factory(
            project=project,
            content=f"note {number}",
            created_by=bob if number % 2 else alice,
            flagged=True,
            instruction_flags=["role_markup"],
            approved_at=timezone.now(),
            approved_by=alice,
        )
    assert queries_for_list() == one


def test_the_task_detail_lists_the_injected_memories_with_links(
    api_client_for, alice, project, task_factory, memory_factory
):
    user_memory = memory_factory(user=alice, content="Alice prefers tabs.")
    project_memory = memory_factory(project=project, content="Deploy with make deploy.")
    forgotten = memory_factory(project=project, content="Soon forgotten.")
    task = task_factory(
        project,
        alice,
        injected_memory_ids=[project_memory.pk, user_memory.pk, forgotten.pk],
    )
    forgotten_id = forgotten.pk
    forgotten.delete()
    client = api_client_for(alice)

    with CaptureQueriesContext(connection) as captured:
        body = client.get(f"/tasks/{task.pk}").json()
    assert body["injected_memory_ids"] == [project_memory.pk, user_memory.pk, forgotten_id]
    assert body["injected_memories"] == [
        {
            "id": project_memory.pk,
            "url": f"/memories/{project_memory.pk}",
            "scope": "project",
            "status": "active",
        },
        {
            "id": user_memory.pk,
            "url": f"/memories/{user_memory.pk}",
            "scope": "user",
            "status": "active",
        },
    ]
    memory_queries = [q for q in captured.captured_queries if "identity_memories" in q["sql"]]
    assert len(memory_queries) == 1  # one query whatever the number of memories
    assert client.get(body["injected_memories"][0]["url"]).status_code == 200


def test_a_task_without_injected_memories_lists_none(api_client_for, alice, project, task_factory):
    task = task_factory(project, alice)
    with CaptureQueriesContext(connection) as captured:
        body = api_client_for(alice).get(f"/tasks/{task.pk}").json()
    assert body["injected_memories"] == []
    assert not [q for q in captured.captured_queries if "identity_memories" in q["sql"]]


def test_the_schema_describes_the_new_endpoints_and_fields(client):
    schema = client.get("/api/schema", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"get", "patch", "delete"} <= set(paths["/memories/{memory_id}"])
    assert "post" in paths["/memories/{memory_id}/approve"]
    assert "post" in paths["/memories/{memory_id}/restore"]
    assert "409" in paths["/memories/{memory_id}/restore"]["post"]["responses"]
    memory = schema["components"]["schemas"]["MemoryOutput"]["properties"]
    assert set(memory) >= MEMORY_FIELDS
    task = schema["components"]["schemas"]["TaskDetailOutput"]["properties"]
    assert "injected_memories" in task
