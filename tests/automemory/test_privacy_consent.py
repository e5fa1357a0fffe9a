"""Privacy by consent: what a task made of its user's private notes stays theirs until they
share it, and nobody else reads those notes through the task.

Alice keeps a private (user-level) memory; her task in a project shared with Bob receives it;
its agent rewords, summarises or translates it into the answer. Checked from Bob's side
everywhere: the API, the console, the preview, the memory tool's search and his own tasks.
"""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from automemory.models import AutoMemoryLog, TaskTextCleaned, task_injected_ids
from automemory.ranking import memories_search
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.transcripts import PRIVATE_NOTE_REMOVED
from controlplane.models import IdentityMemory, Membership, MemoryStatus, Task, TaskStatus
from controlplane.textnorm import text_as_read
from tests.automemory.fake_openai import answer
from worker.executors import ExecutionResult
from worker.loop import Worker

PRIVATE = "Private: I am job hunting and talking to Initech next week."
ANSWERS = {
    "paraphrase": "Fixed the login form. Context kept in mind: the requester may soon move to "
    "a new position at Initech, so the hand-over notes are in docs/handover.md.",
    "summary": "Fixed the login form. Note: requester likely leaving for Initech soon; wrote "
    "hand-over notes in docs/handover.md.",
    "translation": "Formulaire de connexion corrigé. À savoir : le demandeur rejoindra "
    "peut-être Initech bientôt ; notes de passation dans docs/handover.md.",
    "quote": f"Fixed the login form.\nYou told me: {PRIVATE}\nHand-over notes in docs/handover.md.",
}


class Answers:
    """An executor answering `text` after a 60 s run (long enough for every gate)."""

    name = "answers"

    def __init__(self, text: str):
        self.text = text

    def execute(self, request, *, control):
        return ExecutionResult(status="completed", result_text=self.text * 3)


def run(project, user, task_factory, text: str, **fields):
    task = task_factory(project, user, prompt="Fix the login form", **fields)
    Worker(executor=Answers(text), heartbeat_seconds=0, poll_interval=0).run_round()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    # Finished an hour ago after a five-minute run: idle, and long enough.
    task.finished_at = task.finished_at - timedelta(hours=1)
    task.started_at = task.finished_at - timedelta(minutes=5)
    task.save(update_fields=["finished_at", "started_at"])
    return task


@pytest.fixture
def alice_private(alice, memory_factory, auto_memory_on):
    auto_memory_on(alice)
    return memory_factory(user=alice, content=PRIVATE)


def auto_memory_of(task) -> IdentityMemory:
    return IdentityMemory.objects.get(source="auto", source_task=task)


# --- What a task made of private notes is held for its author --------------------------------


@pytest.mark.parametrize("kind", ANSWERS)
def test_a_memory_drawn_from_private_notes_in_a_shared_project_is_held_for_its_author(
    project, alice, bob, alice_private, task_factory, api_client_for, kind
):
    task = run(project, alice, task_factory, ANSWERS[kind])
    assert alice_private.pk in task_injected_ids(task)

    process_auto_memories(user=alice)

    log = AutoMemoryLog.objects.get(task=task)
    memory = auto_memory_of(task)
    # A quote is taken out by its words before anything is written; a rewording is not.
    assert "job hunting" not in memory.content
    assert memory.visibility == "author" and memory.created_by == alice
    assert (log.outcome, log.reason) == ("extracted", "held_for_author")
    # Bob: it does not exist.
    bobs = api_client_for(bob)
    assert bobs.get(f"/memories/{memory.pk}").status_code == 404
    listed = bobs.get(f"/projects/{project.pk}/memories").json()["results"]
    assert memory.pk not in {row["id"] for row in listed}
    for action in ("report", "share", "approve", "restore"):
        response = bobs.post(f"/memories/{memory.pk}/{action}", {"reason": "wrong"}, format="json")
        assert response.status_code == 404, action
    assert bobs.delete(f"/memories/{memory.pk}").status_code == 404
    # Alice: hers, marked so.
    body = api_client_for(alice).get(f"/memories/{memory.pk}").json()
    assert body["visibility"] == "author"


def test_bobs_tasks_neither_get_nor_find_it_and_his_preview_does_not_list_it(
    project, alice, bob, alice_private, task_factory, auto_memory_on, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)
    auto_memory_on(bob, injection_ranking="relevant")

    found = memories_search(
        user_id=bob.pk, project_id=project.pk, query_text="Initech handover login", limit=10
    )
    preview = api_client_for(bob).get(
        f"/projects/{project.pk}/memory-preview", {"prompt": "login handover Initech"}
    )
    bobs_task = run(project, bob, task_factory, "done")

    assert memory.pk not in {m.pk for m in found}
    assert memory.pk not in preview.json()["memory_ids"]
    assert memory.pk not in {item["id"] for item in preview.json()["left_out"]}
    assert memory.pk not in task_injected_ids(bobs_task)
    # Alice's own later tasks get it, and find it.
    mine = memories_search(
        user_id=alice.pk, project_id=project.pk, query_text="Initech handover login", limit=10
    )
    assert memory.pk in {m.pk for m in mine}
    alices = run(project, alice, task_factory, "done")
    assert memory.pk in task_injected_ids(alices)


def test_the_console_hides_it_from_bob(project, alice, bob, alice_private, task_factory):
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)
    client = Client()
    client.force_login(bob)

    assert client.get(f"/console/memories/{memory.pk}").status_code == 404
    page = client.get(f"/console/projects/{project.pk}/memories").content.decode()
    assert "Initech" not in page and f"/console/memories/{memory.pk}" not in page
    projects = client.get("/console/projects").content.decode()
    assert "Initech" not in projects


def test_sharing_makes_it_the_projects(
    project, alice, bob, alice_private, task_factory, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)

    response = api_client_for(alice).post(f"/memories/{memory.pk}/share")

    assert response.status_code == 200 and response.json()["visibility"] == "project"
    assert api_client_for(bob).get(f"/memories/{memory.pk}").status_code == 200
    assert api_client_for(alice).post(f"/memories/{memory.pk}/share").status_code == 409


def test_sharing_settles_the_same_goal_rule(
    project, alice, bob, alice_private, task_factory, api_client_for, auto_memory_on
):
    auto_memory_on(bob, min_result_chars=0)
    earlier = run(project, bob, task_factory, "Fixed the login form by trimming the e-mail.")
    held_task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories()
    bobs, held = auto_memory_of(earlier), auto_memory_of(held_task)
    assert (bobs.status, held.status) == ("active", "active")  # one each side

    api_client_for(alice).post(f"/memories/{held.pk}/share")

    bobs.refresh_from_db()
    held.refresh_from_db()
    # Alice's task finished later: hers stays active, Bob's is superseded by it.
    assert (held.status, bobs.status, bobs.superseded_by_id) == (
        MemoryStatus.ACTIVE,
        MemoryStatus.SUPERSEDED,
        held.pk,
    )


def test_the_setting_shares_at_once(project, alice, alice_private, task_factory, auto_memory_on):
    auto_memory_on(alice, share_private_derived=True)
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    assert auto_memory_of(task).visibility == "project"
    assert AutoMemoryLog.objects.get(task=task).reason == "new"


def test_a_project_of_one_member_is_not_held(project_factory, alice, alice_private, task_factory):
    solo = project_factory(alice, "solo")
    task = run(solo, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    assert auto_memory_of(task).visibility == "project"


def test_a_task_without_private_notes_is_not_held(project, alice, task_factory, auto_memory_on):
    auto_memory_on(alice)
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    assert task_injected_ids(task) == []
    assert auto_memory_of(task).visibility == "project"


def test_a_removed_author_loses_their_held_memory_too(
    project, alice, bob, alice_private, task_factory, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)
    Membership.objects.filter(project=project, user=alice).delete()
    assert api_client_for(alice).get(f"/memories/{memory.pk}").status_code == 404
    assert api_client_for(alice).post(f"/memories/{memory.pk}/share").status_code == 404


# --- Consolidation never merges private notes into the project's memories -------------------

CONSOLIDATOR = "fake-consolidator"


def test_a_held_memory_is_never_merged_into_a_memory_the_project_sees(
    project, alice, bob, alice_private, task_factory, memory_factory, auto_memory_on, fake_openai
):
    auto_memory_on(alice, consolidation_model=CONSOLIDATOR)
    source = task_factory(project, bob, completed=True)
    shared = memory_factory(
        project=project,
        user=bob,
        content="The login form hand-over notes live in docs/handover.md.",
        source="auto",
        source_task=source,
        goal_key="other",
    )
    merged_text = "Login hand-over notes: docs/handover.md; the requester may join Initech."
    fake_openai.respond_with(
        answer(
            {
                "action": "update",
                "memory_id": shared.pk,
                "memory_ids": [],
                "text": merged_text,
                "reason": "adds to it",
            }
        )
    )
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])

    process_auto_memories(user=alice)

    shared.refresh_from_db()
    assert "Initech" not in shared.content
    memory = auto_memory_of(task)
    assert memory.visibility == "author"
    log = AutoMemoryLog.objects.get(task=task)
    assert log.reason == "held_for_author"
    assert "update not applied" in log.detail


# --- Transcripts ------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_others_read_the_result_without_the_quoted_private_note(
    project, alice, alice_private, task_factory, api_client_for, user_for_role, role
):
    task = run(project, alice, task_factory, ANSWERS["quote"])

    theirs = api_client_for(user_for_role[role]).get(f"/tasks/{task.pk}").json()["result_text"]
    hers = api_client_for(alice).get(f"/tasks/{task.pk}").json()["result_text"]

    assert "job hunting" not in theirs and "Initech" not in theirs
    assert PRIVATE_NOTE_REMOVED in theirs
    assert "docs/handover.md" in theirs
    assert hers == task.result_text and "job hunting" in hers
    client = Client()
    client.force_login(user_for_role[role])
    page = client.get(f"/console/tasks/{task.pk}").content.decode()
    assert "job hunting" not in page and "Initech" not in page


def test_the_cleaned_result_is_kept_and_made_again_when_its_inputs_change(
    settings, project, alice, bob, alice_private, task_factory, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["quote"])
    client = api_client_for(bob)

    def read() -> tuple[str, int]:
        with CaptureQueriesContext(connection) as queries:
            text = client.get(f"/tasks/{task.pk}").json()["result_text"]
        return text, len(queries)

    first, cleaning = read()
    kept = TaskTextCleaned.objects.get(task=task)
    assert kept.turn == 1 and kept.text == first and "Initech" not in first
    again, reading = read()
    assert again == first and TaskTextCleaned.objects.filter(task=task).count() == 1
    assert reading < cleaning  # kept: read, not written again

    # The text changes within the turn (a resume finished it again): cleaned anew.
    Task.objects.filter(pk=task.pk).update(result_text=f"Resumed. You told me: {PRIVATE}")
    resumed, _ = read()
    assert resumed.startswith("Resumed.") and "Initech" not in resumed
    assert PRIVATE_NOTE_REMOVED in resumed

    # Another key hashes the fingerprints: cleaned anew, never served from the old entry.
    settings.SECRET_KEY = "another-key-" + "x" * 40
    rekeyed, _ = read()
    assert "Resumed." in rekeyed and TaskTextCleaned.objects.filter(task=task).count() == 3

    # The next turn's text: its entry replaces the earlier turns'.
    Task.objects.filter(pk=task.pk).update(turn=2, result_text="Turn two: all clean.")
    assert read()[0] == "Turn two: all clean."
    assert list(TaskTextCleaned.objects.filter(task=task).values_list("turn", "text")) == [
        (2, None)
    ]


INVISIBLE = {
    "zero-width-space": "\u200b",
    "invisible-times": "\u2062",
    "word-joiner-and-bom": "\u2060\ufeff",
    "variation-selector": "\ufe0e",
    "language-tag": "\U000e0001",
}


@pytest.mark.parametrize("invisible", INVISIBLE.values(), ids=list(INVISIBLE))
def test_invisible_characters_between_its_letters_do_not_carry_the_note_to_others(
    project, alice, bob, alice_private, task_factory, api_client_for, invisible
):
    disguised = re.sub(r"(?<=\w)(?=\w)", invisible, PRIVATE)
    answer_text = f"Fixed the login form.\nYou told me: {disguised}\nHand-over in docs/handover.md."
    task = run(project, alice, task_factory, answer_text)

    theirs = api_client_for(bob).get(f"/tasks/{task.pk}").json()["result_text"]

    assert "job hunting" not in text_as_read(theirs) and "Initech" not in text_as_read(theirs)
    assert PRIVATE_NOTE_REMOVED in theirs and "docs/handover.md" in theirs
    client = Client()
    client.force_login(bob)
    page = text_as_read(client.get(f"/console/tasks/{task.pk}").content.decode())
    assert "job hunting" not in page and "Initech" not in page


def test_the_note_stays_out_after_it_was_deleted(
    project, alice, bob, alice_private, task_factory, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["quote"])
    alice_private.delete()
    theirs = api_client_for(bob).get(f"/tasks/{task.pk}").json()["result_text"]
    assert "job hunting" not in theirs


def test_personal_memories_can_stay_out_of_shared_projects(
    project, project_factory, alice, alice_private, task_factory, auto_memory_on
):
    auto_memory_on(alice, personal_memories_in_shared_projects=False)
    shared = run(project, alice, task_factory, "done")
    solo = run(project_factory(alice, "solo"), alice, task_factory, "done")
    assert alice_private.pk not in task_injected_ids(shared)
    assert alice_private.pk in task_injected_ids(solo)


# --- Continuing another member's task --------------------------------------------------------


def test_only_the_tasks_user_may_continue_it(project, alice, bob, task_factory, api_client_for):
    task = task_factory(project, alice, completed=True)

    refused = api_client_for(bob).post(
        f"/tasks/{task.pk}/continue", {"prompt": "more"}, format="json"
    )
    allowed = api_client_for(alice).post(
        f"/tasks/{task.pk}/continue", {"prompt": "more"}, format="json"
    )

    assert refused.status_code == 403
    assert "created this task" in refused.json()["detail"]
    assert allowed.status_code == 200
    task.refresh_from_db()
    assert task.turn == 2 and task.user == alice


# --- Nothing else leaks it -------------------------------------------------------------------


def test_bobs_log_audit_view_and_the_metrics_never_carry_it(
    project, alice, bob, alice_private, task_factory, api_client_for, client, settings
):
    from prometheus_client import generate_latest

    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories()
    memory = auto_memory_of(task)

    bobs_log = api_client_for(bob).get("/users/me/auto-memory-log").json()["results"]
    assert all(row["task_id"] != task.pk for row in bobs_log)
    assert "Initech" not in generate_latest().decode()
    # The audit rows name ids and reasons, never the text.
    from controlplane.models import AuditEvent

    for event in AuditEvent.objects.all():
        assert "Initech" not in str(event.data), event.action
    assert memory.visibility == "author"


def test_a_share_racing_a_delete_leaves_no_half_state(
    project, alice, alice_private, task_factory, api_client_for
):
    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)
    client = api_client_for(alice)
    assert client.delete(f"/memories/{memory.pk}").status_code == 204
    assert client.post(f"/memories/{memory.pk}/share").status_code == 404


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_shares_at_once_share_once(project, alice, alice_private, task_factory):
    import threading

    from django.db import connection

    from automemory.services.sharing import memory_share
    from controlplane.errors import ConflictError
    from controlplane.models import AuditEvent

    task = run(project, alice, task_factory, ANSWERS["paraphrase"])
    process_auto_memories(user=alice)
    memory = auto_memory_of(task)
    outcomes, start = [], threading.Barrier(2)

    def share():
        try:
            start.wait(10)
            memory_share(user=alice, memory=memory)
            outcomes.append("shared")
        except ConflictError:
            outcomes.append("conflict")
        finally:
            connection.close()

    threads = [threading.Thread(target=share) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(outcomes) == ["conflict", "shared"]
    assert AuditEvent.objects.filter(action="memory_shared").count() == 1
    assert IdentityMemory.objects.get(pk=memory.pk).visibility == "project"
