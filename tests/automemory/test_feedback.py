"""Feedback: tasks cite the memories they used and report the ones that misled; people report.

Through the worker (a real round, the real injector), the services and the API.
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import (
    FeedbackKind,
    MemoryFeedback,
    MemoryState,
    TaskMemoryShown,
    task_injected_ids,
)
from automemory.services.feedback import (
    CITATION_TAIL_CHARS,
    ReportLimitReached,
    citations_parse,
    memories_shown_record,
    memory_cite,
    memory_report,
)
from controlplane.errors import DomainError
from controlplane.models import AuditEvent, IdentityMemory, TaskStatus
from tests.conftest import memory_usage_of
from worker.executors import ExecutionResult
from worker.loop import Worker

# --- Parsing the `Memories used:` line --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Done.\nMemories used: #12, #31", [12, 31]),
        ("Done.\nmemories used:#7", [7]),
        ("Done.\n**Memories used:** #3 and #4.", [3, 4]),
        ("Done.\n> Memories used: #5", [5]),
        ("Done.\nMemories used\uff1a#8", [8]),  # a full-width colon
        ("Done.\nMemories used: none", []),
        ("Done.\nMemories used: #1\nMore text.\nMemories used: #2", [2]),  # the last line wins
        ("Done.\nMemories used: #9, #9, #10", [9, 10]),
        ("Memories used: 12, 31", []),  # ids are written #12
        ("I used memories #1 and #2.", []),  # no such line
        ("Done.\nMemories used: #99999999999999999999", []),  # no id that long
        ("", []),
    ],
)
def test_the_last_memories_used_line_names_the_cited_ids(text, ids):
    assert citations_parse(text) == ids


def test_only_the_end_of_a_long_result_is_read():
    early = "Memories used: #1\n"
    assert citations_parse(early + "x" * CITATION_TAIL_CHARS) == []
    assert citations_parse("x" * 5_000_000 + "\nMemories used: #4") == [4]


def test_a_line_naming_hundreds_of_ids_counts_the_first_fifty(settings):
    settings.AUTOMEMORY_CITES_PER_TASK = 50
    line = "Memories used: " + ", ".join(f"#{i}" for i in range(1, 301))
    assert citations_parse(line) == list(range(1, 51))


# --- Citing through a real worker round -------------------------------------------------------


class EndsWith:
    """An executor whose result is the text it was given, then `tail`."""

    name = "ends-with"

    def __init__(self, tail: str):
        self.tail = tail

    def execute(self, request, *, control):
        return ExecutionResult(status="completed", result_text=f"{request.text}\n\n{self.tail}")


def run_task(project, user, task_factory, *, tail: str, **fields):
    task = task_factory(project, user, **fields)
    Worker(executor=EndsWith(tail), heartbeat_seconds=0, poll_interval=0).run_round()
    task.refresh_from_db()
    return task


def test_a_memories_used_line_counts_the_injected_memories_it_names(
    project, alice, task_factory, memory_factory, auto_memory_on, project_factory, charlie
):
    auto_memory_on(alice)
    used = memory_factory(project=project, content="Deploys go through make deploy.")
    unused = memory_factory(project=project, content="The API lives in api/.")
    elsewhere = memory_factory(project=project_factory(charlie), content="Not yours.")

    task = run_task(
        project,
        alice,
        task_factory,
        tail=f"Memories used: #{used.pk}, #{elsewhere.pk}, #424242",
    )

    assert task.status == TaskStatus.COMPLETED
    assert set(task_injected_ids(task)) == {used.pk, unused.pk}
    used.refresh_from_db()
    assert (memory_usage_of(used).cite_count, memory_usage_of(used).last_cited_at is not None) == (
        1,
        True,
    )
    assert memory_usage_of(IdentityMemory.objects.get(pk=unused.pk)).cite_count == 0
    assert memory_usage_of(IdentityMemory.objects.get(pk=elsewhere.pk)).cite_count == 0
    [row] = MemoryFeedback.objects.all()
    assert (row.memory_id, row.task_id, row.kind, row.via) == (
        used.pk,
        task.pk,
        FeedbackKind.CITE,
        "result_line",
    )
    event = AuditEvent.objects.get(action="memory_cited")
    assert event.data["memory_ids"] == [used.pk]
    assert sorted(event.data["ignored"]) == sorted([elsewhere.pk, 424242])


def test_the_injected_block_labels_each_memory_and_asks_for_the_line(
    project, alice, task_factory, memory_factory, auto_memory_on
):
    auto_memory_on(alice)
    memory = memory_factory(project=project, content="Deploys go through make deploy.")

    task = run_task(project, alice, task_factory, tail="")

    assert f"#{memory.pk} Deploys go through make deploy." in task.result_text
    assert "Memories used: #" in task.result_text


def test_a_result_without_the_line_costs_nothing(
    project, alice, task_factory, memory_factory, auto_memory_on
):
    auto_memory_on(alice)
    memory_factory(project=project)
    run_task(project, alice, task_factory, tail="No line here.")
    assert not MemoryFeedback.objects.exists()
    assert not AuditEvent.objects.filter(action="memory_cited").exists()


# --- The services -----------------------------------------------------------------------------


@pytest.fixture
def shown(project, alice, task_factory, memory_factory):
    """A running task of alice's and a project memory the memory tool showed it."""
    task = task_factory(project, alice, status=TaskStatus.RUNNING)
    memory = memory_factory(project=project, content="Run make test before pushing.")
    memories_shown_record(task=task, memory_ids=[memory.pk])
    return task, memory


def test_a_task_cites_a_memory_once_however_often_it_says_so(shown):
    task, memory = shown

    first = memory_cite(task=task, memory_ids=[memory.pk], note="it saved a failing push")
    again = memory_cite(task=task, memory_ids=[memory.pk, memory.pk])

    assert (first.counted, again.counted, again.already) == ([memory.pk], [], [memory.pk])
    memory.refresh_from_db()
    assert memory_usage_of(memory).cite_count == 1
    assert MemoryFeedback.objects.get().note == "it saved a failing push"


def test_cited_ids_never_shown_are_ignored_without_error(shown, project, memory_factory):
    task, memory = shown
    hidden = memory_factory(project=project, content="Never shown to the task.")

    outcome = memory_cite(task=task, memory_ids=[hidden.pk, 10**12, -3, "7", memory.pk])

    assert outcome.counted == [memory.pk]
    assert outcome.ignored == [hidden.pk, 10**12]
    assert memory_usage_of(IdentityMemory.objects.get(pk=hidden.pk)).cite_count == 0


def test_a_note_holding_a_secret_is_redacted_before_it_is_stored(shown):
    task, memory = shown
    token = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2"

    memory_cite(task=task, memory_ids=[memory.pk], note=f"used it with {token}")
    memory_report(memory=memory, task=task, reason="outdated", note=f"token={token}", via="mcp")

    notes = list(MemoryFeedback.objects.values_list("note", flat=True))
    assert all(token not in note and "[REDACTED]" in note for note in notes), notes


def test_a_report_holds_the_memory_until_an_owner_reviews_it(shown):
    task, memory = shown
    with freeze_time("2026-03-02 10:00:00"):
        memory_report(memory=memory, task=task, reason="wrong", note="it says make check")
    with freeze_time("2026-03-02 11:00:00"):
        memory_report(memory=memory, reason="outdated", user=task.user)

    memory.refresh_from_db()
    assert memory_usage_of(memory).report_count == 2
    # The hold dates from the first report; the last report is the newest.
    assert memory_usage_of(memory).report_hold_at.isoformat().startswith("2026-03-02T10:00")
    assert memory_usage_of(memory).last_reported_at.isoformat().startswith("2026-03-02T11:00")
    assert AuditEvent.objects.filter(action="memory_reported").count() == 2


def test_a_task_reports_a_memory_once(shown):
    task, memory = shown
    first = memory_report(memory=memory, task=task, reason="wrong", via="mcp")
    again = memory_report(memory=memory, task=task, reason="unsafe", via="mcp")
    assert again.pk == first.pk
    assert memory_usage_of(IdentityMemory.objects.get(pk=memory.pk)).report_count == 1


def test_a_task_reports_at_most_its_limit(shown, project, memory_factory, settings):
    settings.AUTOMEMORY_REPORTS_PER_TASK = 2
    task, _ = shown
    others = [memory_factory(project=project) for _ in range(3)]
    memories_shown_record(task=task, memory_ids=[m.pk for m in others])

    memory_report(memory=others[0], task=task, reason="wrong", via="mcp")
    memory_report(memory=others[1], task=task, reason="wrong", via="mcp")
    with pytest.raises(ReportLimitReached):
        memory_report(memory=others[2], task=task, reason="wrong", via="mcp")

    assert memory_usage_of(IdentityMemory.objects.get(pk=others[2].pk)).report_hold_at is None


def test_a_task_cannot_report_a_memory_it_was_never_shown(shown, project, memory_factory):
    task, _ = shown
    hidden = memory_factory(project=project)
    with pytest.raises(DomainError):
        memory_report(memory=hidden, task=task, reason="wrong", via="mcp")
    assert memory_usage_of(IdentityMemory.objects.get(pk=hidden.pk)).report_hold_at is None


@pytest.mark.parametrize("reason", ["", "bad", None, 3, "WRONG"])
def test_an_unknown_reason_is_refused(shown, reason):
    task, memory = shown
    with pytest.raises(DomainError):
        memory_report(memory=memory, task=task, reason=reason, via="mcp")
    assert not MemoryFeedback.objects.exists()


# --- People report through the API ----------------------------------------------------------


@pytest.mark.parametrize("role", ["owner", "member", "viewer"])
def test_anyone_who_can_read_a_memory_may_report_it(
    api_client_for, project, memory_factory, user_for_role, role
):
    memory = memory_factory(project=project)

    response = api_client_for(user_for_role[role]).post(
        f"/memories/{memory.pk}/report", {"reason": "outdated", "note": "moved"}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["memory_id"], body["reason"], body["held"], body["task_id"]) == (
        memory.pk,
        "outdated",
        True,
        None,
    )
    assert memory_usage_of(IdentityMemory.objects.get(pk=memory.pk)).report_hold_at is not None


def test_a_stranger_gets_404_and_nothing_is_held(api_client_for, project, memory_factory, charlie):
    memory = memory_factory(project=project)
    response = api_client_for(charlie).post(
        f"/memories/{memory.pk}/report", {"reason": "wrong"}, format="json"
    )
    assert response.status_code == 404
    assert memory_usage_of(IdentityMemory.objects.get(pk=memory.pk)).report_hold_at is None


def test_another_users_own_memory_is_404(api_client_for, memory_factory, alice, bob):
    private = memory_factory(user=alice, content="Alice's own note.")
    response = api_client_for(bob).post(
        f"/memories/{private.pk}/report", {"reason": "wrong"}, format="json"
    )
    assert response.status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": "bad"},
        {"reason": "wrong", "note": "x" * 2001},
        {"reason": "wrong", "extra": 1},
        {"reason": ["wrong"]},
        {"reason": "wrong", "note": 5},
    ],
)
def test_bad_report_bodies_are_400_and_store_nothing(
    api_client_for, project, memory_factory, bob, body
):
    memory = memory_factory(project=project)
    response = api_client_for(bob).post(f"/memories/{memory.pk}/report", body, format="json")
    assert response.status_code == 400
    assert not MemoryFeedback.objects.exists()


# --- Retention counts use, not exposure --------------------------------------------------------


def test_retention_archives_a_memory_injected_daily_but_never_cited(
    project, alice, task_factory, memory_factory, auto_memory_on
):
    from automemory.services.retention import memories_archive_unused

    auto_memory_on(alice, max_unused_days=7)
    start = timezone.now()
    with freeze_time(start - timedelta(days=30)):
        source = task_factory(project, alice, completed=True)
        ignored = memory_factory(project=project, source="auto", source_task=source, goal_key="a")
        cited_task = task_factory(project, alice, completed=True)
        helpful = memory_factory(
            project=project, source="auto", source_task=cited_task, goal_key="b"
        )
    MemoryState.objects.update_or_create(
        memory_id=ignored.pk,
        defaults=dict(injection_count=30, last_injected_at=start - timedelta(hours=1)),
    )
    MemoryState.objects.update_or_create(
        memory_id=helpful.pk,
        defaults=dict(injection_count=3, last_injected_at=start - timedelta(days=2)),
    )
    task = task_factory(project, alice, status=TaskStatus.RUNNING)
    memories_shown_record(task=task, memory_ids=[helpful.pk])
    with freeze_time(start - timedelta(days=2)):
        memory_cite(task=task, memory_ids=[helpful.pk])

    memories_archive_unused(now=start)

    assert IdentityMemory.objects.get(pk=ignored.pk).status == "archived"
    assert IdentityMemory.objects.get(pk=helpful.pk).status == "active"
    assert TaskMemoryShown.objects.count() == 1
