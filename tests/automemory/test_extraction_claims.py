"""Extraction claims: one sweep at a time calls (and pays) the memory model for a task.

Service-level tests of the claim functions and of the sweep against the fake
OpenAI-compatible server (tests/automemory/fake_openai.py), and a PostgreSQL test with two
real sweeping processes.
"""

import subprocess
import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemoryLog, AutoMemorySettings, ExtractionClaim, SweepState
from automemory.services.claims import (
    SweepClaims,
    extraction_claims_keep,
    extraction_claims_release,
    extraction_claims_take,
)
from automemory.services.extractor import GLOBAL_SWEEP, process_auto_memories
from controlplane.models import (
    IdentityMemory,
    MemorySource,
    Project,
    Task,
    TaskStatus,
    UsageKind,
    UsageRecord,
)
from tests.automemory.fake_openai import FakeOpenAI, Reply, answer, http_error, raw_answer
from tests.automemory.processes import sweeping_process_start

MODEL = "gpt-5-mini"
GOOD = {
    "worth_remembering": True,
    "memory": "Run `make test` for the suite; DATABASE_URL switches it to PostgreSQL.",
    "keywords": ["tests", "postgresql"],
    "reason": "a command later tasks need",
}
NOTHING = {"worth_remembering": False, "memory": "", "keywords": [], "reason": "one-off"}
TTL = 600


def claims_sql(queries) -> list[str]:
    return [q["sql"] for q in queries if "automemory_extractionclaim" in q["sql"]]


def extraction_rows(**filters):
    return UsageRecord.objects.filter(kind=UsageKind.MEMORY_EXTRACTION, **filters)


@pytest.fixture
def modelled(auto_memory_on, alice):
    """Alice's auto memory on, extracting with MODEL."""
    return auto_memory_on(alice, extract_model=MODEL)


@pytest.fixture
def tasks(task_factory, project, alice):
    return [
        task_factory(
            project,
            alice,
            prompt=f"Document test step {i}\nKeep it short.",
            completed=True,
            result_text=f"Wrote docs/testing-{i}.md. " + "`make test` runs pytest. " * 12,
        )
        for i in range(3)
    ]


# --- The claim functions ---------------------------------------------------------------------


def test_a_free_task_is_claimed_with_the_sweeps_token_and_lifetime(tasks, settings):
    settings.AUTOMEMORY_EXTRACTION_CLAIM_SECONDS = TTL
    claims = SweepClaims(label="host-a:1")
    with freeze_time("2026-03-02 10:00:00"):
        taken = extraction_claims_take(claims, [task.pk for task in tasks])

        assert taken == {task.pk for task in tasks} == claims.held
        assert claims.refused == set()
        rows = list(ExtractionClaim.objects.all())
        assert {row.token for row in rows} == {claims.token}
        assert {row.claimed_by for row in rows} == {"host-a:1"}
        assert {row.expires_at for row in rows} == {timezone.now() + timedelta(seconds=TTL)}


def test_claiming_takes_three_statements_whatever_the_number_of_tasks(task_factory, project, alice):
    many = [task_factory(project, alice, completed=True) for _ in range(12)]
    for batch in (many[:2], many[2:]):
        with CaptureQueriesContext(connection) as queries:
            extraction_claims_take(SweepClaims(), [task.pk for task in batch])
        assert len(claims_sql(queries.captured_queries)) == 3


def test_a_task_another_sweep_holds_is_refused_and_keeps_its_holder(tasks):
    first, second = SweepClaims(label="a"), SweepClaims(label="b")
    extraction_claims_take(first, [tasks[0].pk])

    taken = extraction_claims_take(second, [task.pk for task in tasks])

    assert taken == {tasks[1].pk, tasks[2].pk}
    assert second.refused == {tasks[0].pk}
    assert ExtractionClaim.objects.get(task=tasks[0]).token == first.token


def test_an_expired_claim_is_taken_over_and_its_old_holder_lets_the_task_go(tasks, settings):
    settings.AUTOMEMORY_EXTRACTION_CLAIM_SECONDS = TTL
    stalled, later = SweepClaims(label="stalled"), SweepClaims(label="later")
    with freeze_time("2026-03-02 10:00:00") as clock:
        extraction_claims_take(stalled, [tasks[0].pk, tasks[1].pk])
        clock.tick(timedelta(seconds=TTL - 1))
        assert extraction_claims_take(later, [tasks[0].pk]) == set()  # not expired yet
        clock.tick(timedelta(seconds=2))

        assert extraction_claims_take(SweepClaims(), [tasks[0].pk]) == {tasks[0].pk}
        # The stalled sweep wakes up: it renews what it still has, and drops the lost task.
        assert extraction_claims_keep(stalled) == {tasks[1].pk}
        assert ExtractionClaim.objects.get(task=tasks[1]).expires_at == timezone.now() + (
            timedelta(seconds=TTL)
        )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_expired_claim_another_sweep_is_taking_over_is_skipped_not_waited_for(
    task_factory, project, alice, settings
):
    settings.AUTOMEMORY_EXTRACTION_CLAIM_SECONDS = TTL
    busy, free = (task_factory(project, alice, completed=True) for _ in range(2))
    dead = SweepClaims(label="dead")
    extraction_claims_take(dead, [busy.pk, free.pk])
    ExtractionClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    locked, finish = threading.Event(), threading.Event()

    def taking_over_elsewhere():
        try:
            with transaction.atomic():
                list(ExtractionClaim.objects.select_for_update().filter(task=busy))
                locked.set()
                finish.wait(30)
        finally:
            connection.close()

    other = threading.Thread(target=taking_over_elsewhere)
    other.start()
    try:
        assert locked.wait(10)
        claims = SweepClaims(label="live")
        # Had it waited for the lock, it would have taken both once the other let go.
        assert extraction_claims_take(claims, [busy.pk, free.pk]) == {free.pk}
        assert claims.refused == {busy.pk}
    finally:
        finish.set()
        other.join(10)


def test_claims_are_renewed_only_when_half_their_lifetime_is_gone(tasks, settings):
    settings.AUTOMEMORY_EXTRACTION_CLAIM_SECONDS = TTL
    claims = SweepClaims()
    with freeze_time("2026-03-02 10:00:00") as clock:
        extraction_claims_take(claims, [tasks[0].pk])
        first_expiry = claims.expires_at
        clock.tick(timedelta(seconds=TTL // 2 - 10))
        with CaptureQueriesContext(connection) as queries:
            assert extraction_claims_keep(claims) == {tasks[0].pk}
        assert queries.captured_queries == []
        clock.tick(timedelta(seconds=20))

        extraction_claims_keep(claims)

        row = ExtractionClaim.objects.get(task=tasks[0])
        assert row.expires_at == timezone.now() + timedelta(seconds=TTL) > first_expiry


def test_release_deletes_only_the_sweeps_own_claims(tasks):
    mine, theirs = SweepClaims(), SweepClaims()
    extraction_claims_take(mine, [tasks[0].pk, tasks[1].pk])
    extraction_claims_take(theirs, [tasks[2].pk])

    assert extraction_claims_release(mine) == 2
    assert extraction_claims_release(mine) == 0

    assert list(ExtractionClaim.objects.values_list("task_id", flat=True)) == [tasks[2].pk]


def test_a_claim_goes_with_its_task(tasks):
    extraction_claims_take(SweepClaims(), [tasks[0].pk])

    Task.objects.filter(pk=tasks[0].pk).delete()

    assert not ExtractionClaim.objects.exists()


def test_operators_see_claims_in_the_admin_and_may_delete_a_dead_workers(
    client, user_factory, tasks
):
    root = user_factory("root", is_staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    extraction_claims_take(SweepClaims(label="web-9:4242"), [tasks[0].pk])
    url = reverse("admin:automemory_extractionclaim_changelist")

    page = client.get(url)

    assert page.status_code == 200
    assert "web-9:4242" in page.content.decode()
    delete = reverse("admin:automemory_extractionclaim_delete", args=[tasks[0].pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not ExtractionClaim.objects.exists()
    assert client.get(reverse("admin:automemory_extractionclaim_add")).status_code == 403


# --- The sweep -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "outcome", "reason"),
    [
        (answer(GOOD), "extracted", "new"),
        (answer(NOTHING), "skipped", "no_durable_signal"),
        (raw_answer("not json"), "error", "model_output_invalid"),
    ],
    ids=["success", "skip", "error"],
)
def test_the_sweep_releases_its_claims_once_the_log_is_written(
    fake_openai, modelled, tasks, alice, reply, outcome, reason
):
    fake_openai.respond_with(reply)

    with CaptureQueriesContext(connection) as queries:
        summary = process_auto_memories(user=alice)

    assert summary.deferred == 0
    assert {(row.outcome, row.reason) for row in AutoMemoryLog.objects.all()} == {(outcome, reason)}
    assert AutoMemoryLog.objects.count() == len(tasks)
    assert not ExtractionClaim.objects.exists()
    # Claimed in one go for the batch (take over, insert, read back), released in one.
    statements = claims_sql(queries.captured_queries)
    assert len(statements) == 4
    assert statements[-1].startswith("DELETE")


def test_a_task_claimed_by_another_sweep_is_left_unlogged_and_taken_once_released(
    fake_openai, modelled, tasks, alice
):
    fake_openai.respond_with(answer(GOOD))
    elsewhere = SweepClaims(label="other-worker")
    extraction_claims_take(elsewhere, [tasks[1].pk])

    summary = process_auto_memories()

    assert summary.deferred == 1
    assert summary.extracted == 2
    assert not AutoMemoryLog.objects.filter(task=tasks[1]).exists()
    assert len(fake_openai.completion_requests) == 2
    # The global cursor waits before it, so the next sweep reads it again.
    cursor = SweepState.objects.get(name=GLOBAL_SWEEP)
    assert (cursor.cursor_updated_at, cursor.cursor_task_id) < (tasks[1].updated_at, tasks[1].pk)
    assert process_auto_memories().deferred == 1  # still held: no call, no log row
    assert len(fake_openai.completion_requests) == 2

    extraction_claims_release(elsewhere)
    summary = process_auto_memories()

    assert summary.extracted == 1
    assert AutoMemoryLog.objects.get(task=tasks[1]).outcome == "extracted"
    assert len(fake_openai.completion_requests) == 3
    assert extraction_rows().count() == 3
    assert not ExtractionClaim.objects.exists()


def test_a_dead_sweeps_claim_expires_and_the_task_is_extracted_then(
    fake_openai, modelled, tasks, alice, settings
):
    settings.AUTOMEMORY_EXTRACTION_CLAIM_SECONDS = TTL
    fake_openai.respond_with(answer(GOOD))
    with freeze_time(timezone.now()) as clock:
        # A sweep claimed the task and died before it wrote anything.
        extraction_claims_take(SweepClaims(label="dead"), [tasks[0].pk])
        assert process_auto_memories(user=alice).deferred == 1
        assert not AutoMemoryLog.objects.filter(task=tasks[0]).exists()
        clock.tick(timedelta(seconds=TTL + 1))

        summary = process_auto_memories(user=alice)

    assert summary.extracted == 1
    assert AutoMemoryLog.objects.get(task=tasks[0]).outcome == "extracted"
    assert IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task=tasks[0]).exists()
    assert extraction_rows(task=tasks[0]).count() == 1
    assert not ExtractionClaim.objects.exists()


def test_no_claim_is_taken_without_a_model(auto_memory_on, alice, tasks):
    auto_memory_on(alice)
    held = SweepClaims(label="other-worker")
    extraction_claims_take(held, [tasks[0].pk])

    with CaptureQueriesContext(connection) as queries:
        summary = process_auto_memories(user=alice)

    assert summary.extracted == len(tasks)
    assert claims_sql(queries.captured_queries) == []
    assert list(ExtractionClaim.objects.values_list("token", flat=True)) == [held.token]


# --- A paid extraction kept for the retry -----------------------------------------------------

CONSOLIDATOR = "fake-consolidator"
DEPLOY = {
    "worth_remembering": True,
    "memory": "The deploy script ops/deploy.sh fails unless the staging flag is set.",
    "keywords": ["deploy", "staging"],
    "reason": "a pitfall",
}
ADD = answer({"action": "add", "memory_id": None, "memory_ids": [], "text": "", "reason": "new"})


@pytest.fixture
def deploy_task(task_factory, project, alice, auto_memory_on):
    """A similar active memory first (so consolidation calls its model), then the task."""
    auto_memory_on(alice)
    task_factory(
        project,
        alice,
        prompt="Document the deploy script",
        completed=True,
        finished_ago=timedelta(hours=3),
        result_text="The deploy script lives in ops/deploy.sh and needs the staging flag. " * 5,
    )
    process_auto_memories(user=alice)
    auto_memory_on(alice, extract_model=MODEL, consolidation_model=CONSOLIDATOR)
    return task_factory(
        project,
        alice,
        prompt="Fix the staging deploy",
        completed=True,
        finished_ago=timedelta(hours=2),
        result_text="The deploy script ops/deploy.sh fails without the staging flag set. " * 5,
    )


def models_asked(server) -> list[str]:
    return [request.body["model"] for request in server.completion_requests]


def test_a_paid_extraction_whose_consolidation_failed_is_not_paid_again(
    fake_openai, deploy_task, alice
):
    fake_openai.enqueue(answer(DEPLOY), http_error(500))

    process_auto_memories(user=alice)

    assert AutoMemoryLog.objects.get(task=deploy_task).reason == "model_unavailable"
    kept = ExtractionClaim.objects.get(task=deploy_task)
    assert kept.draft_content == DEPLOY["memory"]
    assert kept.draft_keywords == DEPLOY["keywords"]
    assert kept.expires_at <= timezone.now()  # released: any sweep may claim the task
    fake_openai.enqueue(ADD)

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 1
    assert models_asked(fake_openai) == [MODEL, CONSOLIDATOR, CONSOLIDATOR]
    assert extraction_rows(task=deploy_task).count() == 1
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=deploy_task)
    assert memory.content == DEPLOY["memory"]
    assert memory.keywords == DEPLOY["keywords"]
    assert (
        "extraction kept from an earlier sweep"
        in AutoMemoryLog.objects.get(task=deploy_task).detail
    )
    assert not ExtractionClaim.objects.exists()


def test_a_kept_extraction_is_discarded_when_the_task_changed(fake_openai, deploy_task, alice):
    fake_openai.enqueue(answer(DEPLOY), http_error(500))
    process_auto_memories(user=alice)
    # A continuation completed the task again: what it remembers may have changed.
    Task.objects.filter(pk=deploy_task.pk).update(updated_at=timezone.now())
    newer = {**DEPLOY, "memory": "Set the staging flag before running ops/deploy.sh."}
    fake_openai.enqueue(answer(newer), ADD)

    process_auto_memories(user=alice)

    assert models_asked(fake_openai) == [MODEL, CONSOLIDATOR, MODEL, CONSOLIDATOR]
    assert extraction_rows(task=deploy_task).count() == 2
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=deploy_task)
    assert memory.content == newer["memory"]
    assert not ExtractionClaim.objects.exists()


def test_an_invalid_extraction_keeps_nothing(fake_openai, deploy_task, alice):
    fake_openai.enqueue(raw_answer("not json"), raw_answer("still not json"))

    process_auto_memories(user=alice)

    assert AutoMemoryLog.objects.get(task=deploy_task).reason == "model_output_invalid"
    assert not ExtractionClaim.objects.exists()


# --- Two sweeping processes on PostgreSQL ----------------------------------------------------

SWEEPS = (
    "from django.conf import settings;"
    "settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = 3;"
    "from automemory.services.extractor import process_auto_memories;"
    "summaries = [process_auto_memories() for _ in range(10)];"
    "print(sum(summary.extracted for summary in summaries))"
)


def start_sweeps(base_url: str) -> subprocess.Popen:
    return sweeping_process_start(base_url, SWEEPS)


@pytest.fixture
def slow_server():
    server = FakeOpenAI().start()
    good = answer(GOOD)
    server.respond_with(Reply(good.status, good.body, delay=0.3))
    yield server
    server.stop()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweeping_processes_pay_for_each_task_once(user_factory, slow_server):
    users = [user_factory(f"sweeper{i}") for i in range(2)]
    project = Project.objects.create(name="shared", created_by=users[0])
    for user in users:
        AutoMemorySettings.objects.create(
            user=user, generate_memories=True, extract_model=MODEL, monthly_memory_budget_usd=100
        )
    now = timezone.now()
    tasks = []
    for i in range(16):
        finished = now - timedelta(hours=2, seconds=i)
        tasks.append(
            Task(
                project=project,
                user=users[i % 2],
                prompt=f"Release step {i}\nbody",
                status=TaskStatus.COMPLETED,
                started_at=finished - timedelta(minutes=3),
                finished_at=finished,
                result_text=f"The release needs step {i} before tagging. " * 8,
            )
        )
    Task.objects.bulk_create(tasks)

    processes = [start_sweeps(slow_server.base_url) for _ in range(2)]
    extracted_by = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        extracted_by.append(int(out.split()[-1]))
    # Both sweeping processes did part of the work: they ran at the same time.
    assert sum(extracted_by) == len(tasks) and min(extracted_by) > 0, extracted_by

    logs = {row.task_id: row for row in AutoMemoryLog.objects.all()}
    assert len(logs) == len(tasks)
    assert {row.outcome for row in logs.values()} == {"extracted"}
    # Each task's extraction was asked for and paid for once, charged to its user. Under
    # heavy machine load a rare race still lets a second sweep pay for a task once more
    # (docs/auto-memory.md, "Consolidation's limits"): allow at most two such tasks in 16,
    # never a third payment. Without claims every task is paid for twice.
    ledger = extraction_rows()
    paid = Counter(ledger.values_list("task_id", flat=True))
    assert set(paid) == set(logs)
    assert max(paid.values()) <= 2, paid
    assert sum(1 for count in paid.values() if count > 1) <= 2, paid
    assert len(slow_server.completion_requests) == ledger.count() <= len(tasks) + 2
    owners = dict(Task.objects.values_list("pk", "user_id"))
    assert all(owners[row.task_id] == row.user_id for row in ledger)
    assert not ExtractionClaim.objects.exists()
