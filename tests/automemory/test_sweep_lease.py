"""One sweeper at a time: the sweep lease, paid drafts, and two sweeping processes.

Service-level tests of the lease functions and of the sweep against the fake
OpenAI-compatible server (tests/automemory/fake_openai.py), and PostgreSQL tests with real
sweeping processes.
"""

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemoryLog, AutoMemorySettings, ExtractionDraft, SweepState
from automemory.services.extraction.lease import (
    GLOBAL,
    Lease,
    SweepBusy,
    lease_keep,
    lease_take,
    leases_release,
    leases_take,
    user_lease_name,
)
from automemory.services.extraction.sweep import GlobalSweeper, process_auto_memories
from automemory.services.search import memory_keywords
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
    "kind": "fact",
    "memory": "Run `make test` for the suite; DATABASE_URL switches it to PostgreSQL.",
    "keywords": ["tests", "postgresql"],
    "citations": [],
    "reason": "a command later tasks need",
}
NOTHING = {
    "worth_remembering": False,
    "kind": "none",
    "memory": "",
    "keywords": [],
    "citations": [],
    "reason": "one-off",
}
TTL = 600


def extraction_rows(**filters):
    return UsageRecord.objects.filter(kind=UsageKind.MEMORY_EXTRACTION, **filters)


def lease_row(name=GLOBAL) -> SweepState:
    return SweepState.objects.get(name=name)


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


# --- The lease --------------------------------------------------------------------------------


def test_a_missing_lease_row_is_made_by_the_first_take(db):
    SweepState.objects.all().delete()
    lease = Lease(holder="a")

    assert lease_take(lease, GLOBAL)

    row = lease_row()
    assert (row.lease_token, row.lease_generation, row.cursor_updated_at) == (lease.token, 1, None)


def test_a_free_lease_is_taken_with_the_holders_token_and_lifetime(db, settings):
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = TTL
    lease = Lease(holder="host-a:1 sweeper")
    with freeze_time("2026-03-02 10:00:00"):
        assert lease_take(lease, GLOBAL)
        row = lease_row()
        assert row.lease_token == lease.token
        assert row.lease_holder == "host-a:1 sweeper"
        assert row.lease_expires_at == timezone.now() + timedelta(seconds=TTL)
        assert row.lease_generation == 1


def test_a_live_lease_is_refused_in_one_statement(db):
    assert lease_take(Lease(holder="a"), GLOBAL)
    other = Lease(holder="b")

    with CaptureQueriesContext(connection) as queries:
        assert not lease_take(other, GLOBAL)

    assert len(queries.captured_queries) == 1
    assert not other.held


def test_taking_the_lease_again_keeps_its_generation(db):
    lease = Lease(holder="a")
    lease_take(lease, GLOBAL)
    lease_take(lease, GLOBAL)
    assert lease_row().lease_generation == 1


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops(db, settings):
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = TTL
    stalled, later = Lease(holder="stalled"), Lease(holder="later")
    with freeze_time("2026-03-02 10:00:00") as clock:
        assert lease_take(stalled, GLOBAL)
        clock.tick(timedelta(seconds=TTL - 1))
        assert not lease_take(later, GLOBAL)  # not expired yet
        clock.tick(timedelta(seconds=2))

        assert lease_take(later, GLOBAL)
        # The stalled holder wakes up: its renewal finds the lease gone, and it stops.
        assert not lease_keep(stalled)
        assert stalled.lost
        assert lease_row().lease_token == later.token
        assert lease_row().lease_generation == 2


def test_the_lease_is_renewed_only_when_half_its_lifetime_is_gone(db, settings):
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = TTL
    lease = Lease(holder="a")
    with freeze_time("2026-03-02 10:00:00") as clock:
        lease_take(lease, GLOBAL)
        first_expiry = lease.expires_at
        clock.tick(timedelta(seconds=TTL // 2 - 10))
        with CaptureQueriesContext(connection) as queries:
            assert lease_keep(lease)
        assert queries.captured_queries == []
        clock.tick(timedelta(seconds=20))

        assert lease_keep(lease)

        assert lease_row().lease_expires_at == timezone.now() + timedelta(seconds=TTL)
        assert lease.expires_at > first_expiry


def test_a_released_lease_is_taken_at_once(db):
    first, second = Lease(holder="a"), Lease(holder="b")
    lease_take(first, GLOBAL)
    leases_release(first)
    assert lease_take(second, GLOBAL)


def test_user_leases_are_taken_in_one_statement_whatever_their_number(db, user_factory, alice):
    users = [user_factory() for _ in range(5)]
    elsewhere = Lease(holder="a user's own sweep")
    lease_take(elsewhere, user_lease_name(users[0].pk))
    lease = Lease(holder="global sweep")

    with CaptureQueriesContext(connection) as queries:
        got = leases_take(lease, {user_lease_name(user.pk) for user in users})

    assert len(queries.captured_queries) == 1
    assert got == {user_lease_name(user.pk) for user in users[1:]}
    assert SweepState.objects.filter(lease_token=lease.token).count() == 4


def test_operators_see_the_lease_in_the_admin(client, user_factory, db):
    root = user_factory("root", is_staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    lease_take(Lease(holder="web-9:4242 sweeper"), GLOBAL)

    page = client.get(reverse("admin:automemory_sweepstate_changelist"))

    assert page.status_code == 200
    assert "web-9:4242 sweeper" in page.content.decode()


# --- The sweep under the lease ---------------------------------------------------------------


def test_a_sweep_while_another_sweeper_holds_the_lease_costs_one_statement(
    modelled, tasks, fake_openai
):
    lease_take(Lease(holder="another worker"), GLOBAL)

    with CaptureQueriesContext(connection) as queries:
        assert GlobalSweeper(holder="me").sweep() is None
        assert process_auto_memories() is None

    assert len(queries.captured_queries) == 2  # one try each
    assert not AutoMemoryLog.objects.exists()
    assert fake_openai.completion_requests == []


def test_a_worker_sweeper_keeps_the_lease_between_sweeps_and_lets_go_when_told(
    modelled, tasks, fake_openai
):
    fake_openai.respond_with(answer(GOOD))
    sweeper = GlobalSweeper(holder="worker-1 sweeper")

    assert sweeper.sweep().extracted == 3
    assert lease_row().lease_token == sweeper.lease.token
    assert GlobalSweeper(holder="worker-2 sweeper").sweep() is None
    assert sweeper.sweep().scanned == 0

    sweeper.release()

    assert lease_row().lease_token is None
    assert GlobalSweeper(holder="worker-2 sweeper").sweep() is not None


def test_a_dead_sweepers_lease_expires_and_the_next_sweeper_extracts(
    fake_openai, modelled, tasks, settings
):
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = TTL
    fake_openai.respond_with(answer(GOOD))
    with freeze_time(timezone.now()) as clock:
        lease_take(Lease(holder="dead worker"), GLOBAL)
        assert process_auto_memories() is None
        clock.tick(timedelta(seconds=TTL + 1))

        summary = process_auto_memories()

    assert summary.extracted == 3
    assert extraction_rows().count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_sweep_that_lost_its_lease_leaves_its_remaining_tasks_unpaid(
    fake_openai, modelled, tasks, settings
):
    settings.AUTOMEMORY_SWEEP_LEASE_SECONDS = TTL
    sweeper = GlobalSweeper(holder="slow")
    calls = []

    def taken_over_during_the_first_call(request):
        calls.append(request)
        if len(calls) == 1:
            # The sweeper stalls past its lease; another sweeper takes it over meanwhile.
            try:
                SweepState.objects.filter(name=GLOBAL).update(
                    lease_token=Lease(holder="other").token,
                    lease_expires_at=timezone.now() + timedelta(seconds=TTL),
                )
            finally:
                connection.close()  # the server thread's own connection
            sweeper.lease.expires_at = timezone.now()  # its renewal is due
        return answer(GOOD)

    fake_openai.respond_with(taken_over_during_the_first_call)

    summary = sweeper.sweep()

    assert summary.extracted == 1
    assert summary.deferred == 2
    assert len(calls) == 1
    assert AutoMemoryLog.objects.count() == 1
    # The cursor is the new holder's: the stalled sweeper cannot move it.
    assert lease_row().cursor_updated_at is None


def test_a_users_own_sweep_waits_for_the_global_sweep_then_says_busy(
    modelled, tasks, alice, settings, api_client_for
):
    settings.AUTOMEMORY_USER_SWEEP_WAIT_SECONDS = 0
    lease_take(Lease(holder="global sweep"), user_lease_name(alice.pk))

    with pytest.raises(SweepBusy):
        process_auto_memories(user=alice)
    response = api_client_for(alice).post(
        "/users/me/auto-memory/run", {"force": False}, format="json"
    )

    assert response.status_code == 409
    assert response["Retry-After"] == "30"
    assert "sweep" in response.json()["detail"]
    assert not AutoMemoryLog.objects.exists()


def test_the_global_sweep_leaves_the_tasks_of_a_user_whose_own_sweep_runs(
    fake_openai, modelled, tasks, alice, bob, project, task_factory, auto_memory_on
):
    fake_openai.respond_with(answer(GOOD))
    auto_memory_on(bob, extract_model=MODEL)
    bobs = task_factory(project, bob, prompt="Bob's task", completed=True)
    own = Lease(holder="alice's own sweep")
    lease_take(own, user_lease_name(alice.pk))

    summary = process_auto_memories()

    assert (summary.extracted, summary.deferred) == (1, 3)
    assert list(AutoMemoryLog.objects.values_list("task_id", flat=True)) == [bobs.pk]
    # The cursor waits before alice's tasks, so the next sweep reads them again.
    cursor = lease_row()
    first = min(tasks, key=lambda task: (task.updated_at, task.pk))
    assert (cursor.cursor_updated_at, cursor.cursor_task_id) < (first.updated_at, first.pk)
    # The global sweep let go of the users' leases it took; alice's is still her sweep's.
    assert lease_row(user_lease_name(bob.pk)).lease_token is None
    assert lease_row(user_lease_name(alice.pk)).lease_token == own.token

    leases_release(own)
    assert process_auto_memories().extracted == 3
    assert len(fake_openai.completion_requests) == 4


def test_no_sweep_state_is_left_held_after_a_users_sweep(modelled, tasks, alice, fake_openai):
    fake_openai.respond_with(answer(NOTHING))
    process_auto_memories(user=alice)
    assert not SweepState.objects.filter(lease_token__isnull=False).exists()


# --- A paid extraction is never paid again ----------------------------------------------------

CONSOLIDATOR = "fake-consolidator"
DEPLOY = {
    "worth_remembering": True,
    "kind": "fact",
    "memory": "The deploy script ops/deploy.sh fails unless the staging flag is set.",
    "keywords": ["deploy", "staging"],
    "citations": [],
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
    kept = ExtractionDraft.objects.get(task=deploy_task)
    assert (kept.content, kept.keywords, kept.extract_model) == (
        DEPLOY["memory"],
        DEPLOY["keywords"],
        MODEL,
    )
    fake_openai.enqueue(ADD)

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 1
    assert models_asked(fake_openai) == [MODEL, CONSOLIDATOR, CONSOLIDATOR]
    assert extraction_rows(task=deploy_task).count() == 1
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=deploy_task)
    assert memory.content == DEPLOY["memory"]
    assert memory_keywords(memory.pk) == DEPLOY["keywords"]
    log = AutoMemoryLog.objects.get(task=deploy_task)
    assert "extraction kept from an earlier sweep" in log.detail
    assert not ExtractionDraft.objects.exists()


def test_the_draft_is_written_with_the_ledger_row_of_its_call(fake_openai, deploy_task, alice):
    fake_openai.enqueue(answer(DEPLOY), http_error(500))

    process_auto_memories(user=alice)

    row = extraction_rows(task=deploy_task).get()
    draft = ExtractionDraft.objects.get(task=deploy_task)
    assert draft.created_at >= row.finished_at - timedelta(seconds=1)


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
    assert not ExtractionDraft.objects.exists()


def test_a_kept_extraction_is_not_used_for_another_extraction_model(
    fake_openai, deploy_task, alice, auto_memory_on
):
    fake_openai.enqueue(answer(DEPLOY), http_error(500))
    process_auto_memories(user=alice)
    auto_memory_on(alice, extract_model="gpt-5", consolidation_model=CONSOLIDATOR)
    fake_openai.enqueue(answer(DEPLOY), ADD)

    process_auto_memories(user=alice)

    assert models_asked(fake_openai) == [MODEL, CONSOLIDATOR, "gpt-5", CONSOLIDATOR]


def test_a_declined_extraction_is_kept_too_and_settles_the_task(fake_openai, deploy_task, alice):
    fake_openai.enqueue(answer(NOTHING))

    process_auto_memories(user=alice)

    assert AutoMemoryLog.objects.get(task=deploy_task).reason == "no_durable_signal"
    assert not ExtractionDraft.objects.exists()  # a stable skip: nothing to keep
    assert models_asked(fake_openai) == [MODEL]


def test_an_invalid_extraction_keeps_nothing(fake_openai, deploy_task, alice):
    fake_openai.enqueue(raw_answer("not json"), raw_answer("still not json"))

    process_auto_memories(user=alice)

    assert AutoMemoryLog.objects.get(task=deploy_task).reason == "model_output_invalid"
    assert not ExtractionDraft.objects.exists()
    assert extraction_rows(task=deploy_task).count() == 2  # both calls were paid


CRASH_AFTER_PAYING = (
    "import os;"
    "from automemory.services.extraction import writing;"
    "writing.extraction_write = lambda *a, **k: os._exit(9);"
    "from automemory.services.extraction.sweep import process_auto_memories;"
    "process_auto_memories()"
)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sweep_that_dies_after_paying_does_not_pay_again(
    fake_openai, user_factory, project_factory, task_factory
):
    user = user_factory("crasher")
    AutoMemorySettings.objects.create(user=user, generate_memories=True, extract_model=MODEL)
    task = task_factory(project_factory(user), user, prompt="Write the docs", completed=True)
    fake_openai.respond_with(answer(GOOD))

    process = sweeping_process_start(fake_openai.base_url, CRASH_AFTER_PAYING)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 9, err[-3000:]
    assert extraction_rows(task=task).count() == 1
    assert ExtractionDraft.objects.filter(task=task).exists()
    assert not AutoMemoryLog.objects.filter(task=task).exists()
    # A crash releases nothing: the next sweep waits for the dead sweeper's leases to expire.
    assert process_auto_memories() is None
    with freeze_time(timezone.now() + timedelta(seconds=TTL + 1)):
        summary = process_auto_memories()

    assert summary.extracted == 1
    assert len(fake_openai.completion_requests) == 1
    assert extraction_rows(task=task).count() == 1
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    assert memory.content == GOOD["memory"]


# --- Two sweeping processes on PostgreSQL ----------------------------------------------------

# Each process sweeps until every task has its log row (whoever wrote it), or 240 s pass:
# on a loaded machine a fixed number of tries may end before the work does.
SWEEPS = (
    "import time;"
    "from django.conf import settings;"
    "settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = 3;"
    "from automemory.models import AutoMemoryLog;"
    "from automemory.services.extraction.sweep import process_auto_memories;"
    "extracted = busy = 0; deadline = time.monotonic() + 240\n"
    "while AutoMemoryLog.objects.count() < 16 and time.monotonic() < deadline:\n"
    "    summary = process_auto_memories()\n"
    "    if summary is None:\n"
    "        busy += 1; time.sleep(0.05)\n"
    "    else:\n"
    "        extracted += summary.extracted\n"
    "print(extracted, busy)"
)


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

    processes = [sweeping_process_start(slow_server.base_url, SWEEPS) for _ in range(2)]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        results.append(tuple(int(value) for value in out.split()[-2:]))
    extracted, busy = (sum(column) for column in zip(*results, strict=True))
    assert extracted == len(tasks), results
    # They ran at the same time: each found the other holding the lease at some point.
    assert busy > 0, results

    logs = {row.task_id: row for row in AutoMemoryLog.objects.all()}
    assert len(logs) == len(tasks)
    assert {row.outcome for row in logs.values()} == {"extracted"}
    # Each task's extraction was asked for and paid for exactly once, charged to its user.
    ledger = extraction_rows()
    paid = Counter(ledger.values_list("task_id", flat=True))
    assert paid == Counter({task_id: 1 for task_id in logs}), paid
    assert len(slow_server.completion_requests) == ledger.count() == len(tasks)
    owners = dict(Task.objects.values_list("pk", "user_id"))
    assert all(owners[row.task_id] == row.user_id for row in ledger)
    assert not ExtractionDraft.objects.exists()
    assert not SweepState.objects.filter(lease_token__isnull=False).exists()
