"""Reports by people: one open report per person and memory, a repeat after an owner's
approval needs something new, a per-person limit an hour, and the review page says who
holds what. Through the API, the console and the services; races on PostgreSQL."""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from automemory.checks import automemory_settings_check
from automemory.models import FeedbackKind, FeedbackVia, MemoryFeedback
from automemory.services.feedback import memories_shown_record, memory_report
from automemory.services.memory_tools import tool_report
from controlplane.models import AuditEvent, IdentityMemory, TaskStatus
from controlplane.services.memories import memory_approve


def report(client, memory, reason="wrong", note=""):
    return client.post(
        f"/memories/{memory.pk}/report", {"reason": reason, "note": note}, format="json"
    )


def held(memory) -> bool:
    return IdentityMemory.objects.get(pk=memory.pk).report_hold_at is not None


def reported(memory) -> int:
    return IdentityMemory.objects.get(pk=memory.pk).report_count


def approve(owner, memory) -> None:
    memory_approve(user=owner, memory=IdentityMemory.objects.get(pk=memory.pk))


# --- One open report per person and memory ------------------------------------------------------


def test_it_refuses_a_second_report_by_the_same_person_while_theirs_is_open(
    api_client_for, project, vera, memory_factory
):
    memory = memory_factory(project=project)
    client = api_client_for(vera)

    first = report(client, memory, "wrong", "It says Jenkins.")
    again = [report(client, memory, reason, "Still wrong.") for reason in ("wrong", "unsafe")]

    assert first.status_code == 201 and first.json()["repeat"] is False
    assert [response.status_code for response in again] == [400, 400]
    assert "reported this memory already" in again[0].json()["detail"]
    assert reported(memory) == 1
    assert MemoryFeedback.objects.filter(memory=memory).count() == 1
    assert AuditEvent.objects.filter(action="memory_reported", target_id=memory.pk).count() == 1


def test_it_counts_one_report_from_each_person(
    api_client_for, project, alice, bob, vera, memory_factory
):
    memory = memory_factory(project=project)

    codes = [report(api_client_for(user), memory).status_code for user in (alice, bob, vera)]

    assert codes == [201, 201, 201]
    assert reported(memory) == 3


def test_the_database_keeps_one_open_report_per_person_and_memory(project, vera, memory_factory):
    memory = memory_factory(project=project)
    fields = {"memory": memory, "user": vera, "kind": FeedbackKind.REPORT, "via": "person"}
    MemoryFeedback.objects.create(reason="wrong", **fields)

    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryFeedback.objects.create(reason="unsafe", **fields)
    # A closed report and an open one may stand together.
    MemoryFeedback.objects.create(reason="outdated", closed_at=timezone.now(), **fields)
    assert MemoryFeedback.objects.filter(memory=memory).count() == 2


# --- After an owner's approval: a repeat needs something new -----------------------------------


def test_a_report_after_an_approval_needs_a_new_reason_or_note_and_is_a_repeat(
    api_client_for, project, alice, vera, memory_factory
):
    memory = memory_factory(project=project)
    client = api_client_for(vera)
    assert report(client, memory, "wrong", "It says Jenkins.").status_code == 201
    approve(alice, memory)
    assert not held(memory)

    same = report(client, memory, "wrong", "It says Jenkins.")
    new_reason = report(client, memory, "outdated", "It says Jenkins.")

    assert same.status_code == 400
    assert "approved this memory after your report" in same.json()["note"][0]
    assert new_reason.status_code == 201 and new_reason.json()["repeat"] is True
    assert held(memory)
    assert reported(memory) == 2
    approve(alice, memory)
    # Neither earlier reason and note again; a new note is enough.
    assert report(client, memory, "outdated", "It says Jenkins.").status_code == 400
    assert report(client, memory, "wrong", "It says Jenkins.").status_code == 400
    assert report(client, memory, "wrong", "Jenkins went in March.").status_code == 201


def test_another_persons_first_report_after_an_approval_is_no_repeat(
    api_client_for, project, alice, bob, vera, memory_factory
):
    memory = memory_factory(project=project)
    assert report(api_client_for(vera), memory).status_code == 201
    approve(alice, memory)

    response = report(api_client_for(bob), memory)

    assert response.status_code == 201 and response.json()["repeat"] is False


def test_an_approval_closes_the_open_reports_and_only_those(
    api_client_for, project, alice, bob, vera, memory_factory
):
    memory = memory_factory(project=project)
    other = memory_factory(project=project)
    report(api_client_for(vera), memory)
    report(api_client_for(bob), memory)
    report(api_client_for(vera), other)

    approve(alice, memory)

    assert not MemoryFeedback.objects.filter(memory=memory, closed_at__isnull=True).exists()
    assert MemoryFeedback.objects.get(memory=other).closed_at is None


# --- A person's limit an hour ---------------------------------------------------------------------


def test_a_person_reports_at_most_the_limit_an_hour_per_project(
    api_client_for, project_factory, project, alice, bob, vera, memory_factory, settings
):
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = 3
    memories = [memory_factory(project=project) for _ in range(5)]
    elsewhere = project_factory(alice, "elsewhere", viewers=[vera])
    client = api_client_for(vera)

    with freeze_time(timezone.now()) as clock:
        codes = [report(client, memory).status_code for memory in memories[:3]]
        refused = report(client, memories[3])
        assert codes == [201, 201, 201]
        assert refused.status_code == 429
        assert "3 reports of this project's memories in the last hour" in refused.json()["detail"]
        assert "try again in 60 minutes" in refused.json()["detail"]
        assert not held(memories[3])
        # Another project, another person: their own counts.
        assert report(client, memory_factory(project=elsewhere)).status_code == 201
        assert report(api_client_for(bob), memories[3]).status_code == 201
        clock.tick(timedelta(minutes=59, seconds=30))
        assert report(client, memories[4]).status_code == 429
        clock.tick(timedelta(seconds=31))
        assert report(client, memories[4]).status_code == 201


def test_refused_reports_do_not_count_against_the_limit(
    api_client_for, project, vera, memory_factory, settings
):
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = 2
    first, second = memory_factory(project=project), memory_factory(project=project)
    client = api_client_for(vera)

    assert report(client, first).status_code == 201
    assert [report(client, first).status_code for _ in range(5)] == [400] * 5
    assert report(client, second).status_code == 201


def test_a_persons_tasks_keep_their_own_limit(
    project, alice, task_factory, memory_factory, settings
):
    """A task's reports count against the task's limit, not its user's an hour."""
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = 1
    memories = [memory_factory(project=project) for _ in range(4)]
    task = task_factory(project, alice, status=TaskStatus.RUNNING)
    memories_shown_record(task=task, memory_ids=[m.pk for m in memories])
    for memory in memories[:3]:
        memory_report(memory=memory, task=task, reason="wrong", via=FeedbackVia.MCP)

    memory_report(memory=memories[3], reason="wrong", user=alice)

    assert all(held(memory) for memory in memories)


@pytest.mark.parametrize("bad", [0, -1, "10", None])
def test_the_person_limit_is_checked_at_start_up(settings, bad):
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = bad
    problems = automemory_settings_check()
    assert [problem.id for problem in problems] == ["automemory.E003"]
    assert "AUTOMEMORY_REPORTS_PER_PERSON_HOUR" in problems[0].msg


def test_the_console_says_when_a_person_is_over_their_limit(
    client, project, vera, memory_factory, settings
):
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = 1
    first, second = memory_factory(project=project), memory_factory(project=project)
    client.force_login(vera)
    url = reverse("console:memory_report", args=[first.pk])
    assert client.post(url, {"reason": "wrong"}).status_code == 302

    again = client.post(url, {"reason": "wrong"})
    over = client.post(reverse("console:memory_report", args=[second.pk]), {"reason": "wrong"})

    assert again.status_code == 400 and "reported this memory already" in again.content.decode()
    assert over.status_code == 429 and "the most one person may" in over.content.decode()
    assert not held(second)


# --- The review page: who holds what --------------------------------------------------------------


def test_the_review_page_names_who_holds_each_memory_and_marks_repeats(
    client, api_client_for, project, alice, bob, vera, task_factory, memory_factory
):
    memory = memory_factory(project=project, content="Deploys go through Jenkins.")
    report(api_client_for(vera), memory, "wrong", "First look.")
    approve(alice, memory)
    report(api_client_for(vera), memory, "outdated", "Jenkins went in March.")
    report(api_client_for(bob), memory, "unsafe")
    task = task_factory(project, bob, status=TaskStatus.RUNNING)
    memories_shown_record(task=task, memory_ids=[memory.pk])
    memory_report(memory=memory, task=task, reason="wrong", via=FeedbackVia.MCP)
    client.force_login(alice)

    body = client.get(reverse("console:project_review", args=[project.pk])).content.decode()

    holders = body.split('class="holders"')[1].split("</ul>")[0]
    assert "vera: outdated, a repeat" in holders
    assert "bob: unsafe" in holders
    assert f"Task {task.pk} (bob's): wrong" in holders
    assert "First look." not in holders  # closed by the approval: listed, not holding
    rows = body.split('class="reports"')[1].split("</table>")[0].split("<tr>")
    first = next(row for row in rows if "First look." in row)
    second = next(row for row in rows if "Jenkins went in March." in row)
    assert "before an earlier approval" in first and "repeat" not in first
    assert "repeat" in second and "before an earlier approval" not in second


# --- Notes: redacted before they are cut ----------------------------------------------------------

STRIPE_KEY = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"  # 32 characters: the rule wants 16+
LONG_KEY = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc9Z1x"  # 36 characters


def assert_no_prefix_stored(key: str) -> None:
    notes = list(MemoryFeedback.objects.values_list("note", flat=True))
    assert notes
    for note in notes:
        leaked = [n for n in range(8, len(key) + 1) if key[:n] in note]
        assert not leaked, (note, leaked)


def test_a_tool_report_note_never_keeps_the_start_of_a_secret_cut_at_its_limit(
    project, alice, task_factory, memory_factory
):
    """1,977 spaces then a Stripe live key: cut before redaction, its first 23 characters
    were stored (too short for the rule), the spaces collapsed in front of them."""
    memory = memory_factory(project=project)
    task = task_factory(project, alice, status=TaskStatus.RUNNING)
    memories_shown_record(task=task, memory_ids=[memory.pk])

    tool_report(task=task, memory_id=memory.pk, reason="unsafe", note=" " * 1977 + LONG_KEY)

    assert_no_prefix_stored(LONG_KEY)
    assert "[REDACTED]" in MemoryFeedback.objects.get().note


@pytest.mark.parametrize(
    ("note_max", "note"),
    [
        (500, " " * 1977 + LONG_KEY),  # the attack's note, as the API receives it
        (500, "see" + " " * 1961 + LONG_KEY),  # the longest note the API takes
        (100, "see" + " " * 374 + LONG_KEY),  # a shorter limit cuts closer
        (100, "see" + " " * 374 + STRIPE_KEY + " then more words"),
    ],
)
def test_an_api_report_note_never_keeps_the_start_of_a_secret(
    api_client_for, project, vera, memory_factory, settings, note_max, note
):
    settings.AUTOMEMORY_FEEDBACK_NOTE_MAX_CHARS = note_max
    memory = memory_factory(project=project)

    response = report(api_client_for(vera), memory, "unsafe", note)

    assert response.status_code == 201, response.content
    key = LONG_KEY if LONG_KEY in note else STRIPE_KEY
    assert_no_prefix_stored(key)
    assert key[:8] not in response.json()["note"]


def test_a_long_note_is_still_cut_to_its_limit_after_redaction(
    api_client_for, project, vera, memory_factory, settings
):
    settings.AUTOMEMORY_FEEDBACK_NOTE_MAX_CHARS = 50
    memory = memory_factory(project=project)

    report(api_client_for(vera), memory, "wrong", STRIPE_KEY + " " + "word " * 300)

    stored = MemoryFeedback.objects.get().note
    assert len(stored) <= 50 and stored.startswith("[REDACTED]") and stored.endswith("…")


# --- Races on PostgreSQL --------------------------------------------------------------------------


def race(calls) -> Counter:
    start = threading.Barrier(len(calls))
    codes: list[object] = []

    def run(call) -> None:
        try:
            start.wait(30)
            codes.append(call())
        except Exception as error:
            codes.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return Counter(codes)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_person_reporting_one_memory_at_once_counts_once(
    api_client_for, project, vera, memory_factory
):
    memory = memory_factory(project=project)
    clients = [api_client_for(vera) for _ in range(10)]

    codes = race([lambda c=client: report(c, memory).status_code for client in clients])

    assert codes == Counter({201: 1, 400: 9})
    assert reported(memory) == 1
    assert MemoryFeedback.objects.filter(memory=memory).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_person_reporting_many_memories_at_once_stays_within_the_limit(
    api_client_for, project, vera, memory_factory, settings
):
    settings.AUTOMEMORY_REPORTS_PER_PERSON_HOUR = 3
    memories = [memory_factory(project=project) for _ in range(10)]
    clients = [api_client_for(vera) for _ in memories]

    codes = race(
        [
            lambda c=client, m=memory: report(c, m).status_code
            for client, memory in zip(clients, memories, strict=True)
        ]
    )

    assert codes == Counter({201: 3, 429: 7})
    assert sum(held(memory) for memory in memories) == 3


# --- The migration: reports made before it ---------------------------------------------------

BEFORE = [("automemory", "0012_privacy_settings")]
AFTER = [("automemory", "0013_person_reports")]


@pytest.fixture
def migrated_back_afterwards():
    """Leave the database at the latest migrations of every app, as the other tests expect."""
    from django.db.migrations.executor import MigrationExecutor

    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_leaves_one_open_report_per_person_and_memory(
    project, alice, vera, memory_factory, migrated_back_afterwards
):
    """A person's ten reports of a held memory leave the newest open; reports of a memory an
    owner has approved since are closed."""
    from django.db.migrations.executor import MigrationExecutor

    now = timezone.now()
    flooded = memory_factory(project=project, report_hold_at=now)
    released = memory_factory(project=project)
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("automemory", "MemoryFeedback")
    rows = {"kind": "report", "reason": "wrong", "via": "person", "user_id": vera.pk}
    for index in range(10):
        old.objects.create(memory_id=flooded.pk, note=f"flood {index}", **rows)
    old.objects.create(memory_id=released.pk, note="before the approval", **rows)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)

    open_reports = MemoryFeedback.objects.filter(closed_at__isnull=True)
    assert list(open_reports.values_list("note", flat=True)) == ["flood 9"]
    assert MemoryFeedback.objects.count() == 11
