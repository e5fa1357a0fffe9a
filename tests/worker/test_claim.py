"""Claiming: oldest queued first, each task to exactly one worker, losing a race is silent."""

from datetime import timedelta

from django.utils import timezone
from freezegun import freeze_time

from controlplane.models import Task, TaskStatus
from worker import services
from worker.models import RunOutcome, TaskRun


def test_it_claims_the_oldest_queued_task_first(project, queued_task):
    now = timezone.now()
    newer = queued_task(project, prompt="newer", queued_at=now)
    older = queued_task(project, prompt="older", queued_at=now - timedelta(minutes=5))

    first = services.task_claim_next(worker_id="w1")
    second = services.task_claim_next(worker_id="w1")

    assert [first.pk, second.pk] == [older.pk, newer.pk]


def test_ties_on_queue_time_go_by_id(project, queued_task):
    now = timezone.now()
    tasks = [queued_task(project, queued_at=now) for _ in range(3)]
    claimed = [services.task_claim_next(worker_id="w1").pk for _ in range(3)]
    assert claimed == [t.pk for t in tasks]


def test_a_claimed_task_is_running_under_the_worker(project, task_factory):
    task = task_factory(project)

    claimed = services.task_claim_next(worker_id="w1", executor="echo")

    task.refresh_from_db()
    assert claimed.pk == task.pk
    assert task.status == TaskStatus.RUNNING
    assert task.worker_id == "w1"
    assert task.executor == "echo"
    assert task.heartbeat_at is not None
    assert task.started_at is not None
    run = TaskRun.objects.get(task=task)
    assert (run.worker_id, run.turn, run.outcome) == ("w1", 1, RunOutcome.RUNNING)


def test_each_task_goes_to_one_worker_only(project, task_factory):
    ids = {task_factory(project).pk for _ in range(3)}

    claims = [services.task_claim_next(worker_id=f"w{i}") for i in range(5)]

    got = [c.pk for c in claims if c is not None]
    assert sorted(got) == sorted(ids)
    assert claims[3:] == [None, None]
    assert TaskRun.objects.count() == 3


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

    assert first.pk == early.pk
    assert second is None


def test_a_resume_keeps_the_turn_start_time(project, task_factory):
    started = timezone.now() - timedelta(minutes=30)
    task = task_factory(project, is_resume=True, started_at=started, turn=2)

    services.task_claim_next(worker_id="w1")

    task.refresh_from_db()
    assert task.started_at == started
    assert task.turn == 2
    assert TaskRun.objects.get(task=task).is_resume is True


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


def test_losing_the_race_returns_none(project, task_factory, monkeypatch):
    task = task_factory(project)
    real_claim = services._task_claim

    def someone_else_was_faster(*, task, **kwargs):
        type(task).objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING, worker_id="w2")
        return real_claim(task=task, **kwargs)

    monkeypatch.setattr(services, "_task_claim", someone_else_was_faster)

    assert services.task_claim_next(worker_id="w1") is None
    task.refresh_from_db()
    assert task.worker_id == "w2"
    assert not TaskRun.objects.filter(worker_id="w1").exists()


def test_a_task_created_without_a_queue_time_gets_one_and_its_place(project, alice):
    with freeze_time(timezone.now() - timedelta(minutes=5)):
        older = Task.objects.create(project=project, user=alice, prompt="older")
    newer = Task.objects.create(project=project, user=alice, prompt="newer")
    assert older.queued_at is not None and older.queued_at < newer.queued_at
    claimed = [services.task_claim_next(worker_id="w1").pk for _ in range(2)]
    assert claimed == [older.pk, newer.pk]
