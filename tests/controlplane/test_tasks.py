"""Queueing, reading, continuing and messaging tasks through the API."""

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from controlplane.models import AuditEvent, Task, TaskFollowup, TaskStatus

from .helpers import post_json


@pytest.fixture
def alice_client(api_client_for, alice):
    return api_client_for(alice)


@pytest.mark.django_db
class TestQueueing:
    def test_a_member_queues_a_task(self, api_client_for, project, bob):
        response = post_json(
            api_client_for(bob), f"/projects/{project.pk}/tasks", {"prompt": "Fix the login bug"}
        )

        assert response.status_code == 201
        body = response.json()
        assert body["status"] == "queued"
        assert body["turn"] == 1
        assert body["queued_at"] is not None
        assert body["kind"] == "standard"
        assert body["user"] == "bob"
        task = Task.objects.get(pk=body["id"])
        assert task.prompt == "Fix the login bug"
        assert AuditEvent.objects.filter(action="task_created", target_id=str(task.pk)).exists()

    def test_the_prompt_and_goal_are_stored_exactly_as_sent(self, alice_client, project):
        prompt = "  Line one\n\tline two  \n"
        response = post_json(
            alice_client,
            f"/projects/{project.pk}/tasks",
            {"prompt": prompt, "goal": "Ship v2 ✨", "kind": "coordinator"},
        )

        task = Task.objects.get(pk=response.json()["id"])
        assert (task.prompt, task.goal, task.kind) == (prompt, "Ship v2 ✨", "coordinator")

    def test_a_subtask_names_a_parent_in_the_same_project(
        self, alice_client, project, task_factory
    ):
        parent = task_factory(project, kind="coordinator")

        response = post_json(
            alice_client,
            f"/projects/{project.pk}/tasks",
            {"prompt": "part 1", "parent_task_id": parent.pk},
        )

        assert response.status_code == 201
        assert response.json()["parent_task_id"] == parent.pk

    def test_a_parent_from_another_project_is_refused(
        self, alice_client, project, project_factory, alice, task_factory, snapshot
    ):
        elsewhere = task_factory(project_factory(alice, "other"))
        before = snapshot()

        response = post_json(
            alice_client,
            f"/projects/{project.pk}/tasks",
            {"prompt": "part 1", "parent_task_id": elsewhere.pk},
        )

        assert response.status_code == 400
        assert "parent_task_id" in response.json()
        assert snapshot() == before

    @pytest.mark.parametrize(
        ("payload", "field"),
        [
            ({}, "prompt"),
            ({"prompt": ""}, "prompt"),
            ({"prompt": " \n "}, "prompt"),
            ({"prompt": 5}, "prompt"),
            ({"prompt": None}, "prompt"),
            ({"prompt": "x" * 100_001}, "prompt"),
            ({"prompt": "ok", "goal": ""}, "goal"),
            ({"prompt": "ok", "goal": ["a"]}, "goal"),
            ({"prompt": "ok", "kind": "boss"}, "kind"),
            ({"prompt": "ok", "parent_task_id": "1"}, "parent_task_id"),
            ({"prompt": "ok", "parent_task_id": 1.5}, "parent_task_id"),
            ({"prompt": "ok", "parent_task_id": True}, "parent_task_id"),
            ({"prompt": "ok", "parent_task_id": 0}, "parent_task_id"),
            ({"prompt": "ok", "parent_task_id": 2**64}, "parent_task_id"),
            ({"prompt": "ok", "parent_task_id": 999_999}, "parent_task_id"),
        ],
    )
    def test_bad_task_input_names_the_field_and_writes_nothing(
        self, alice_client, project, snapshot, payload, field
    ):
        before = snapshot()

        response = post_json(alice_client, f"/projects/{project.pk}/tasks", payload)

        assert response.status_code == 400
        assert field in response.json()
        assert snapshot() == before

    def test_a_prompt_of_exactly_the_limit_is_accepted(self, alice_client, project):
        response = post_json(
            alice_client, f"/projects/{project.pk}/tasks", {"prompt": "x" * 100_000}
        )

        assert response.status_code == 201


@pytest.mark.django_db
class TestReading:
    def test_the_detail_shows_the_stored_prompt_goal_and_results(
        self, api_client_for, project, vera, task_factory, memory_factory
    ):
        shared = [memory_factory(project=project), memory_factory(project=project)]
        task = task_factory(
            project,
            prompt="Fix it",
            goal="Make login work",
            completed=True,
            result_text="Fixed.",
            cost_usd="0.125",
            thread_id="thread-1",
            injected_memory_ids=[memory.pk for memory in shared],
        )

        body = api_client_for(vera).get(f"/tasks/{task.pk}").json()

        assert body["prompt"] == "Fix it"
        assert body["goal"] == "Make login work"
        assert body["title"] == "Make login work"
        assert body["status"] == "completed"
        assert body["result_text"] == "Fixed."
        assert body["cost_usd"] == 0.125
        assert body["thread_id"] == "thread-1"
        assert body["injected_memory_ids"] == [memory.pk for memory in shared]
        assert body["started_at"] and body["finished_at"]
        for key in ("failure_reason", "kind", "parent_task_id", "turn", "project_id"):
            assert key in body

    def test_the_detail_of_a_task_without_injected_memories_is_two_statements(
        self, api_client_for, project, alice, task_factory
    ):
        """The token with its user, then the task with its project, user and the caller's
        role: one statement each (no lazy load of the task's user for its name)."""
        task = task_factory(project, alice, completed=True, result_text="Fixed.")
        client = api_client_for(alice)
        client.get(f"/tasks/{task.pk}")  # the token's first use is stamped once

        with CaptureQueriesContext(connection) as captured:
            body = client.get(f"/tasks/{task.pk}").json()

        assert body["user"] == alice.username
        assert len(captured.captured_queries) == 2, [q["sql"] for q in captured.captured_queries]

    def test_the_list_is_paginated_newest_first(self, alice_client, project, task_factory):
        tasks = [task_factory(project, prompt=f"task {i}") for i in range(3)]

        first = alice_client.get(f"/projects/{project.pk}/tasks?page_size=2").json()
        second = alice_client.get(first["next"]).json()

        assert first["count"] == 3
        assert [t["id"] for t in first["results"]] == [tasks[2].pk, tasks[1].pk]
        assert [t["id"] for t in second["results"]] == [tasks[0].pk]
        assert second["next"] is None
        assert "prompt" not in first["results"][0]

    def test_the_list_filters_by_status(self, alice_client, project, task_factory):
        task_factory(project)
        done = task_factory(project, completed=True)

        body = alice_client.get(f"/projects/{project.pk}/tasks?status=completed").json()

        assert [t["id"] for t in body["results"]] == [done.pk]

    def test_an_unknown_status_filter_is_a_400(self, alice_client, project):
        response = alice_client.get(f"/projects/{project.pk}/tasks?status=sleeping")

        assert response.status_code == 400
        assert "status" in response.json()

    def test_the_list_holds_only_that_projects_tasks(
        self, alice_client, project, project_factory, alice, task_factory
    ):
        task_factory(project_factory(alice, "other"))
        mine = task_factory(project)

        body = alice_client.get(f"/projects/{project.pk}/tasks").json()

        assert [t["id"] for t in body["results"]] == [mine.pk]


@pytest.mark.django_db
class TestContinuing:
    @pytest.mark.parametrize("status", ["completed", "failed", "interrupted", "merged"])
    def test_a_terminal_task_is_queued_for_its_next_turn(
        self, api_client_for, project, bob, task_factory, status
    ):
        """Only the task's own user continues it: the turn is billed to them and its thread
        holds their memories (another member gets 403, tested with the privacy rules)."""
        task = task_factory(
            project,
            bob,
            completed=True,
            status=status,
            worker_id="w1",
            failure_reason="boom",
            thread_id="t-1",
            is_resume=True,
        )
        task.status = status
        task.save()

        response = post_json(
            api_client_for(bob), f"/tasks/{task.pk}/continue", {"prompt": "Now add tests"}
        )

        assert response.status_code == 200
        task.refresh_from_db()
        assert task.status == TaskStatus.QUEUED
        assert task.turn == 2
        assert task.continuation_prompt == "Now add tests"
        assert task.is_resume is False
        assert task.worker_id == "" and task.heartbeat_at is None
        assert task.failure_reason == ""
        assert task.thread_id == "t-1"
        assert task.prompt == "Fix the login bug"
        assert task.queued_at is not None
        assert AuditEvent.objects.filter(action="task_continued", target_id=str(task.pk)).exists()

    @pytest.mark.parametrize("status", ["queued", "running"])
    def test_a_task_in_progress_cannot_be_continued(
        self, alice_client, project, task_factory, snapshot, status
    ):
        task = task_factory(project, status=status)
        before = snapshot()

        response = post_json(alice_client, f"/tasks/{task.pk}/continue", {"prompt": "more"})

        assert response.status_code == 409
        task.refresh_from_db()
        assert (task.status, task.turn) == (status, 1)
        assert snapshot() == before

    def test_continuing_needs_a_prompt(self, alice_client, project, task_factory):
        task = task_factory(project, completed=True)

        response = post_json(alice_client, f"/tasks/{task.pk}/continue", {})

        assert response.status_code == 400
        assert "prompt" in response.json()
        task.refresh_from_db()
        assert task.turn == 1


@pytest.mark.django_db
class TestFollowups:
    def test_a_member_sends_a_message_from_another_task(
        self, api_client_for, project, bob, task_factory
    ):
        target, sender = task_factory(project), task_factory(project)

        response = post_json(
            api_client_for(bob),
            f"/tasks/{target.pk}/followups",
            {"from_task_id": sender.pk, "message": "The API changed"},
        )

        assert response.status_code == 201
        followup = TaskFollowup.objects.get(pk=response.json()["id"])
        assert (followup.task, followup.from_task, followup.message) == (
            target,
            sender,
            "The API changed",
        )
        assert followup.created_by == bob

    def test_a_message_needs_no_sender_task(self, alice_client, project, task_factory):
        target = task_factory(project)

        response = post_json(alice_client, f"/tasks/{target.pk}/followups", {"message": "hi"})

        assert response.status_code == 201
        assert response.json()["from_task_id"] is None

    def test_messages_are_listed_on_the_task(self, api_client_for, project, vera, task_factory):
        target = task_factory(project)
        TaskFollowup.objects.create(task=target, message="one")

        body = api_client_for(vera).get(f"/tasks/{target.pk}/followups").json()

        assert [f["message"] for f in body["results"]] == ["one"]

    def test_a_sender_the_caller_cannot_see_is_refused(
        self, alice_client, project, project_factory, charlie, task_factory, snapshot
    ):
        target = task_factory(project)
        hidden = task_factory(project_factory(charlie, "charlie's"))
        before = snapshot()

        response = post_json(
            alice_client,
            f"/tasks/{target.pk}/followups",
            {"from_task_id": hidden.pk, "message": "psst"},
        )

        assert response.status_code == 400
        assert "from_task_id" in response.json()
        assert snapshot() == before

    @pytest.mark.parametrize(
        "payload",
        [{}, {"message": ""}, {"message": 1}, {"message": "x" * 100_001}],
    )
    def test_bad_messages_are_refused(self, alice_client, project, task_factory, snapshot, payload):
        target = task_factory(project)
        before = snapshot()

        response = post_json(alice_client, f"/tasks/{target.pk}/followups", payload)

        assert response.status_code == 400
        assert "message" in response.json()
        assert snapshot() == before

    def test_a_task_cannot_message_itself(self, alice_client, project, task_factory):
        task = task_factory(project)

        response = post_json(
            alice_client, f"/tasks/{task.pk}/followups", {"from_task_id": task.pk, "message": "me"}
        )

        assert response.status_code == 400


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_continuations_of_one_task_queue_one_turn(project, alice, task_factory):
    """Both requests race on the row lock; one queues turn 2, the other gets 409."""
    from tests.conftest import api_token_for

    task = task_factory(project, completed=True)
    token = api_token_for(alice)
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def continue_it():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        barrier.wait()
        try:
            codes.append(
                post_json(client, f"/tasks/{task.pk}/continue", {"prompt": "again"}).status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=continue_it) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(codes) == [200, 409]
    task.refresh_from_db()
    assert task.turn == 2
