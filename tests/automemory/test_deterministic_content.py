"""The deterministic memory text (no model): the goal once, then what the result adds."""

import pytest
from django.core.management import call_command

from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import IdentityMemory, MemorySource
from tests.automemory.helpers import log_of

BADGE = "Add a CI badge to the README"
LEARNED = "Used the shields.io badge of the ci.yml workflow; it needs the default branch name."


@pytest.fixture
def on(auto_memory_on, alice):
    return auto_memory_on(alice, min_result_chars=0)


def memory_of(task):
    return IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)


@pytest.mark.parametrize(
    "echo",
    [
        f"{BADGE}\n",
        f"{BADGE}\n\n{BADGE}\n",
        f"Result for: {BADGE}\n",
        f"## Task\n{BADGE.upper()}.\n---\n",
        f"> {BADGE}\n",
    ],
    ids=["echo", "echo-twice", "result-for", "heading-and-rule", "quoted"],
)
def test_the_goal_is_said_once(task_factory, project, alice, on, echo):
    task = task_factory(project, alice, prompt=BADGE, completed=True, result_text=echo + LEARNED)
    process_auto_memories(user=alice)
    assert memory_of(task).content == f"{BADGE}\n{LEARNED}"


def test_a_line_that_says_more_than_the_goal_is_kept(task_factory, project, alice, on):
    said = f"Before I {BADGE.lower()} I checked the workflow names"
    task = task_factory(project, alice, prompt=BADGE, completed=True, result_text=said)
    process_auto_memories(user=alice)
    assert memory_of(task).content == f"{BADGE}\n{said}"


def test_only_leading_restatements_are_dropped(task_factory, project, alice, on):
    result = f"{BADGE}\n{LEARNED}\n{BADGE}\n"
    task = task_factory(project, alice, prompt=BADGE, completed=True, result_text=result)
    process_auto_memories(user=alice)
    assert memory_of(task).content == f"{BADGE}\n{LEARNED}\n{BADGE}"


@pytest.mark.parametrize(
    ("prompt", "result"),
    [("ok", "ok"), (BADGE, f"{BADGE}\n\n## {BADGE}\n"), ("Ship it", "Result for: Ship it\n---")],
)
def test_a_result_that_adds_nothing_is_not_remembered(
    task_factory, project, alice, on, prompt, result
):
    task = task_factory(project, alice, prompt=prompt, completed=True, result_text=result)

    summary = process_auto_memories(user=alice, force=True)

    assert not IdentityMemory.objects.filter(source=MemorySource.AUTO).exists()
    log = log_of(task)
    assert (log.outcome, log.reason) == ("skipped", "no_durable_signal")
    assert log.detail == "the result adds nothing to the goal"
    assert summary.skipped["no_durable_signal"] == 1


def test_the_goal_field_is_the_goal_line(task_factory, project, alice, on):
    task = task_factory(
        project,
        alice,
        prompt="Please do the thing described in the goal",
        goal="Pin ruff in CI",
        completed=True,
        result_text="Pin ruff in CI\nPinned ruff to 0.8 in requirements-dev.txt.",
    )
    process_auto_memories(user=alice)
    assert memory_of(task).content == "Pin ruff in CI\nPinned ruff to 0.8 in requirements-dev.txt."


def test_the_excerpt_is_still_capped_and_redacted(task_factory, project, alice, on, settings):
    settings.AUTOMEMORY_RESULT_EXCERPT_CHARS = 100
    result = f"{BADGE}\n" * 50 + "The token is ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8. " * 20
    task = task_factory(project, alice, prompt=BADGE, completed=True, result_text=result)
    process_auto_memories(user=alice)
    content = memory_of(task).content
    assert content.startswith(f"{BADGE}\nThe token is [REDACTED]")
    assert len(content) <= len(BADGE) + 1 + 100
    assert "ghp_" not in content


@pytest.mark.django_db(transaction=True)
def test_the_echo_worker_memory_says_the_goal_once(api_client_for, alice, project):
    """The demo's case: the echo executor answers with its prompt."""
    client = api_client_for(alice)
    client.put(
        "/users/me/auto-memory-settings",
        {
            "generate_memories": True,
            "idle_seconds": 0,
            "min_duration_seconds": 0,
            "min_result_chars": 0,
        },
        format="json",
    )
    tasks = f"/projects/{project.pk}/tasks"
    remembered = client.post(tasks, {"prompt": f"{BADGE}\n{LEARNED}"}, format="json").json()
    echo_only = client.post(tasks, {"prompt": "ok"}, format="json").json()

    call_command("run_worker", "--once", "--executor", "echo", "--worker-id", "t")

    memories = client.get(f"/projects/{project.pk}/memories").json()["results"]
    assert [m["content"] for m in memories] == [f"{BADGE}\n{LEARNED}"]
    log = {row["task_id"]: row for row in client.get("/users/me/auto-memory-log").json()["results"]}
    assert log[remembered["id"]]["reason"] == "new"
    assert log[echo_only["id"]]["reason"] == "no_durable_signal"
