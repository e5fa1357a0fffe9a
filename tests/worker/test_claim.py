"""Claiming: oldest queued first, each task to exactly one worker, losing a race is silent."""

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone
from freezegun import freeze_time

from controlplane.models import Task, TaskStatus
from controlplane.services.quota import quota_status_get
from worker import services
from worker.models import TaskRun


def test_it_claims_the_oldest_queued_task_first(project, queued_task):
    now = timezone.now()
    newer = queued_task(project, prompt="newer", queued_at=now)
    older = queued_task(project, prompt="older", queued_at=now - timedelta(minutes=5))

    first = services.task_claim_next(worker_id="w1")
    second = services.task_claim_next(worker_id="w1")

    assert [first.task.pk, second.task.pk] == [older.pk, newer.pk]


def test_ties_on_queue_time_go_by_id(project, queued_task):
    now = timezone.now()
    tasks = [queued_task(project, queued_at=now) for _ in range(3)]
    claimed = [services.task_claim_next(worker_id="w1").task.pk for _ in range(3)]
    assert claimed == [t.pk for t in tasks]


def test_a_claimed_task_is_running_under_the_worker(project, task_factory):
    task = task_factory(project)

    claimed = services.task_claim_next(worker_id="w1", executor="echo").task

    task.refresh_from_db()
    assert claimed.pk == task.pk
    assert task.status == TaskStatus.RUNNING
    assert task.worker_id == "w1"
    assert task.executor == "echo"
    assert task.heartbeat_at is not None
    assert task.started_at is not None
    assert task.claimed_at == task.heartbeat_at
    # The claim returns the row as stored: the same values as a fresh read.
    for field in Task._meta.concrete_fields:
        assert getattr(claimed, field.attname) == getattr(task, field.attname), field.name
    # The run is the task row while it runs; the history gets it when it ends.
    assert not TaskRun.objects.exists()


def test_the_claim_reads_the_quota_and_the_injection_preferences_with_the_task(
    project, alice, task_factory, settings
):
    from automemory.models import AutoMemorySettings, TaskAutoMemoryFlags
    from controlplane.models import Quota
    from controlplane.services.usage import usage_record

    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("4"))
    usage_record(user_id=alice.pk, cost_usd=Decimal("3"), finished_at=timezone.now())
    AutoMemorySettings.objects.create(
        user=alice, use_memories=True, injection_ranking="relevant", injection_max_chars=900
    )
    task = task_factory(project)
    TaskAutoMemoryFlags.objects.create(task=task, use_memories=False)

    claim = services.task_claim_next(worker_id="w1")

    assert (claim.quota.monthly_limit_usd, claim.quota.spent_usd) == (Decimal("4"), Decimal("3"))
    assert claim.quota.remaining_percent == Decimal("25")
    assert claim.quota == quota_status_get(user_id=alice.pk)
    assert (claim.preferences.ranking, claim.preferences.max_chars) == ("relevant", 900)
    assert claim.preferences.use_memories is False  # the task's flag wins over the setting


def test_a_user_without_quota_row_or_settings_gets_the_defaults_in_the_claim(
    project, task_factory, settings
):
    settings.CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD = Decimal("7")
    task_factory(project)

    claim = services.task_claim_next(worker_id="w1")

    assert (claim.quota.monthly_limit_usd, claim.quota.spent_usd) == (Decimal("7"), Decimal("0"))
    assert claim.preferences.use_memories is False
    assert claim.preferences.ranking == "recent"


def test_each_task_goes_to_one_worker_only(project, task_factory):
    ids = {task_factory(project).pk for _ in range(3)}

    claims = [services.task_claim_next(worker_id=f"w{i}") for i in range(5)]

    got = [c.task.pk for c in claims if c is not None]
    assert sorted(got) == sorted(ids)
    assert claims[3:] == [None, None]
    assert set(Task.objects.values_list("worker_id", flat=True)) == {"w0", "w1", "w2"}


def test_it_ignores_tasks_that_are_not_queued(project, task_factory):
    task_factory(project, status=TaskStatus.RUNNING, worker_id="other")
    task_factory(project, completed=True)
    task_factory(project, status=TaskStatus.FAILED)

    assert services.task_claim_next(worker_id="w1") is None


def test_queued_before_leaves_later_tasks_alone(project, queued_task):
    now = timezone.now()
    early = queued_task(project, queued_at=now - timedelta(seconds=10))
    queued_task(project, queued_at=now + timedelta(seconds=10))

    first = services.task_claim_next(worker_id="w1", queued_before=now)
    second = services.task_claim_next(worker_id="w1", queued_before=now)

    assert first.task.pk == early.pk
    assert second is None


def test_a_resume_keeps_the_turn_start_time(project, task_factory):
    started = timezone.now() - timedelta(minutes=30)
    task = task_factory(project, is_resume=True, started_at=started, turn=2)

    claim = services.task_claim_next(worker_id="w1")

    task.refresh_from_db()
    assert task.started_at == started
    assert task.turn == 2
    assert claim.task.is_resume is True
    assert task.claimed_at > started  # the run's own start


def test_a_new_turn_gets_a_new_start_time(project, task_factory):
    old_start = timezone.now() - timedelta(days=1)
    task = task_factory(
        project,
        turn=2,
        continuation_prompt="now add tests",
        started_at=old_start,
        finished_at=old_start + timedelta(minutes=5),
    )

    services.task_claim_next(worker_id="w1")

    task.refresh_from_db()
    assert task.started_at > old_start
    assert task.finished_at is None


def test_a_task_taken_meanwhile_is_not_claimed_again(project, task_factory):
    task = task_factory(project)
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, worker_id="w2")

    assert services.task_claim_next(worker_id="w1") is None
    task.refresh_from_db()
    assert task.worker_id == "w2"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_claim_skips_a_row_another_worker_has_locked_without_waiting(project, task_factory):
    """SKIP LOCKED: while another transaction holds the oldest queued task, a claim takes
    the next one at once instead of waiting for the lock."""
    first, second = task_factory(project), task_factory(project)
    locked, release = threading.Event(), threading.Event()

    def hold_first():
        with transaction.atomic():
            list(Task.objects.select_for_update().filter(pk=first.pk))
            locked.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold_first)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        claim = services.task_claim_next(worker_id="w1")
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join()

    assert claim.task.pk == second.pk
    assert waited < 2


def test_a_task_created_without_a_queue_time_gets_one_and_its_place(project, alice):
    with freeze_time(timezone.now() - timedelta(minutes=5)):
        older = Task.objects.create(project=project, user=alice, prompt="older")
    newer = Task.objects.create(project=project, user=alice, prompt="newer")
    assert older.queued_at is not None and older.queued_at < newer.queued_at
    claimed = [services.task_claim_next(worker_id="w1").task.pk for _ in range(2)]
    assert claimed == [older.pk, newer.pk]
