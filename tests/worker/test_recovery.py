"""Heartbeats and checkpoint resume: a task whose worker went quiet is re-queued, same turn."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone
from freezegun import freeze_time

from controlplane.models import AuditEvent, Task, TaskStatus, UsageRecord
from worker import services
from worker.models import RunOutcome, TaskRun

STALE = timedelta(seconds=60)


def _claimed(project, task_factory, worker_id="w-old", **fields):
    """A task as `worker_id` claimed it (what the worker holds in memory)."""
    task_factory(project, **fields)
    return services.task_claim_next(worker_id=worker_id).task


def test_a_heartbeat_refreshes_only_the_owners_task(project, task_factory):
    task = _claimed(project, task_factory)
    later = timezone.now() + timedelta(seconds=30)

    assert services.task_heartbeat(task_id=task.pk, worker_id="w-old", now=later) is True
    assert services.task_heartbeat(task_id=task.pk, worker_id="w-other", now=later) is False

    task.refresh_from_db()
    assert task.heartbeat_at == later


def test_a_task_with_a_stale_heartbeat_is_requeued_as_a_resume_of_the_same_turn(
    project, task_factory
):
    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory, turn=3, continuation_prompt="and the docs")
    with freeze_time("2026-03-02 10:01:01"):
        recovered = services.tasks_recover_stale(stale_after=STALE, actor_label="worker:new")

    assert recovered == [task.pk]
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    assert task.is_resume is True
    assert task.turn == 3
    assert task.worker_id == ""
    assert TaskRun.objects.get(task=task).outcome == RunOutcome.LOST
    event = AuditEvent.objects.get(action="worker_task_recovered")
    assert event.target_id == str(task.pk)
    assert event.data["stale_worker_id"] == "w-old"
    assert event.actor_label == "worker:new"


def test_a_task_with_a_fresh_heartbeat_is_left_alone(project, task_factory):
    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory)
    with freeze_time("2026-03-02 10:00:59"):
        assert services.tasks_recover_stale(stale_after=STALE) == []
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING


def test_a_beating_worker_keeps_its_task(project, task_factory):
    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory)
    with freeze_time("2026-03-02 10:00:50"):
        services.task_heartbeat(task_id=task.pk, worker_id="w-old")
    with freeze_time("2026-03-02 10:01:30"):
        assert services.tasks_recover_stale(stale_after=STALE) == []


def test_recovery_is_counted_once(project, task_factory):
    with freeze_time("2026-03-02 10:00:00"):
        _claimed(project, task_factory)
    with freeze_time("2026-03-02 10:05:00"):
        first = services.tasks_recover_stale(stale_after=STALE)
        second = services.tasks_recover_stale(stale_after=STALE)
    assert len(first) == 1
    assert second == []
    assert AuditEvent.objects.filter(action="worker_task_recovered").count() == 1


def test_the_old_worker_cannot_finish_a_recovered_task(project, task_factory):
    from worker.executors import ExecutionResult

    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory)
    with freeze_time("2026-03-02 10:05:00"):
        services.tasks_recover_stale(stale_after=STALE)
        finished = services.task_finish(
            task=task,
            worker_id="w-old",
            result=ExecutionResult(status="completed", result_text="late"),
        )
    assert finished is False
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    assert task.result_text == ""
    assert not UsageRecord.objects.exists()


def test_a_worker_cannot_write_with_an_older_claim_of_the_same_task(project, task_factory):
    """The fence is the claim (worker and claim time), not the worker alone: the same worker
    id that claimed the task again (a restarted process reusing its id) owns the new claim
    only."""
    from worker.executors import ExecutionResult

    with freeze_time("2026-03-02 10:00:00"):
        old = _claimed(project, task_factory, worker_id="w1")
    with freeze_time("2026-03-02 10:05:00"):
        services.tasks_recover_stale(stale_after=STALE)
        new = services.task_claim_next(worker_id="w1").task
        assert (
            services.task_heartbeat(task_id=old.pk, worker_id="w1", claimed_at=old.claimed_at)
            is False
        )
        assert (
            services.task_finish(
                task=old,
                worker_id="w1",
                result=ExecutionResult(status="completed", result_text="a"),
            )
            is False
        )
        assert (
            services.task_finish(
                task=new,
                worker_id="w1",
                result=ExecutionResult(status="completed", result_text="b"),
            )
            is True
        )
    task = Task.objects.get(pk=old.pk)
    assert (task.status, task.result_text) == (TaskStatus.COMPLETED, "b")
    assert UsageRecord.objects.filter(task=task).count() == 1
    runs = TaskRun.objects.filter(task=task).values_list("outcome", "started_at")
    assert list(runs) == [("lost", old.claimed_at), ("completed", new.claimed_at)]


def test_recovery_closes_a_run_row_opened_at_the_claim(project, task_factory):
    """A worker that opens a `running` row at its claim (and leaves no claim time): the task
    recovered from it gets that row closed as lost, not a second row."""
    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory)
        Task.objects.filter(pk=task.pk).update(claimed_at=None)  # a claim with no claim time
        TaskRun.objects.create(
            task=task, turn=1, worker_id="w-old", executor="echo", started_at=timezone.now()
        )
    with freeze_time("2026-03-02 10:05:00"):
        assert services.tasks_recover_stale(stale_after=STALE) == [task.pk]
    [run] = TaskRun.objects.filter(task=task)
    assert (run.outcome, run.worker_id) == (RunOutcome.LOST, "w-old")
    assert run.finished_at == datetime(2026, 3, 2, 10, 5, tzinfo=UTC)


def test_recovery_takes_a_batch_in_a_fixed_number_of_statements(
    project, task_factory, django_assert_max_num_queries
):
    """One read, then one transaction whatever the batch: lock, update, runs, audit events
    (and the check for run rows left open at a claim)."""
    with freeze_time("2026-03-02 10:00:00"):
        for _ in range(12):
            _claimed(project, task_factory)
    with freeze_time("2026-03-02 10:05:00"), django_assert_max_num_queries(8):
        assert len(services.tasks_recover_stale(stale_after=STALE)) == 12
    assert TaskRun.objects.filter(outcome=RunOutcome.LOST).count() == 12
    assert AuditEvent.objects.filter(action="worker_task_recovered").count() == 12


def test_the_worker_runs_a_recovered_task_as_a_resume(
    project, task_factory, worker_factory, spy_executor, memory_hooks
):
    with freeze_time("2026-03-02 10:00:00"):
        task = _claimed(project, task_factory, prompt="Fix the login bug")
        first_start = timezone.now()
    with freeze_time("2026-03-02 10:05:00"):
        report = worker_factory(spy_executor, worker_id="w-new").run_round()

    assert report.recovered == [task.pk]
    [request] = spy_executor.requests
    assert request.is_resume is True
    assert request.turn == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.is_resume is False
    assert task.started_at == first_start  # the turn started when it first ran
    runs = list(TaskRun.objects.filter(task=task).values_list("worker_id", "outcome", "is_resume"))
    assert runs == [("w-old", "lost", False), ("w-new", "completed", True)]
