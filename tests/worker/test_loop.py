"""The loop's steps, called directly: claim one, run one, a round, run_once, signals, heartbeat."""

import logging
import signal
import threading
import time

import pytest

from controlplane.models import Task, TaskStatus
from tests.worker.conftest import SpyExecutor
from worker.models import WorkerProcess


def test_claim_one_returns_none_on_an_empty_queue(worker):
    assert worker.claim_one() is None


def test_run_once_processes_every_queued_task_and_sweeps_once(
    project, task_factory, worker, memory_hooks
):
    tasks = [task_factory(project, prompt=f"task {i}") for i in range(30)]

    report = worker.run_once()

    assert len(report.runs) == 30
    assert memory_hooks.sweeps == 1
    assert set(Task.objects.values_list("status", flat=True)) == {TaskStatus.COMPLETED}
    assert [r.task_id for r in report.runs] == [t.pk for t in tasks]


def test_a_round_runs_at_most_round_max_tasks(project, task_factory, worker_factory):
    for _ in range(5):
        task_factory(project)
    worker = worker_factory(round_max_tasks=2)

    assert len(worker.run_round().runs) == 2
    assert Task.objects.filter(status=TaskStatus.QUEUED).count() == 3


def test_run_once_registers_and_unregisters_the_worker(worker):
    worker.run_once()
    process = WorkerProcess.objects.get(worker_id="test-worker")
    assert process.stopped_at is not None
    assert process.executor == "echo"


def test_each_task_run_is_logged_with_outcome_and_duration(project, task_factory, worker, caplog):
    task = task_factory(project)
    with caplog.at_level(logging.INFO, logger="worker.loop"):
        worker.run_once()
    assert f"task {task.pk} turn 1: completed in" in caplog.text
    assert "round: 1 tasks {'completed': 1}" in caplog.text


def test_a_first_signal_lets_the_task_in_hand_finish_then_stops(
    project, task_factory, worker_factory
):
    first = task_factory(project)
    second = task_factory(project)

    def signal_midway(request, control):
        worker.handle_signal(signal.SIGTERM)

    worker = worker_factory(SpyExecutor(action=signal_midway))
    worker.run_forever()

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == TaskStatus.COMPLETED
    assert second.status == TaskStatus.QUEUED
    assert worker.stopping and not worker.aborting


def test_a_second_signal_cancels_the_execution_and_requeues_the_task(
    project, task_factory, worker_factory
):
    task = task_factory(project)
    seen = {}

    def two_signals(request, control):
        worker.handle_signal(signal.SIGTERM)
        worker.handle_signal(signal.SIGINT)
        seen["cancelled"] = control.cancelled

    worker = worker_factory(SpyExecutor(action=two_signals))
    worker.run_forever()

    assert seen == {"cancelled": True}
    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    assert task.is_resume is True
    assert task.turn == 1
    assert task.worker_id == ""


def test_the_poll_sleep_ends_on_a_signal(worker_factory):
    worker = worker_factory(poll_interval=30)
    threading.Timer(0.2, worker.handle_signal, args=(signal.SIGTERM,)).start()
    started = time.monotonic()
    worker.run_forever()
    assert time.monotonic() - started < 5


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_thread_beats_while_the_executor_runs(project, task_factory, worker_factory):
    task = task_factory(project)
    beats = []

    def slow(request, control):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(beats) < 2:
            value = Task.objects.filter(pk=request.task_id).values_list("heartbeat_at", flat=True)[
                0
            ]
            if value not in beats:
                beats.append(value)
            time.sleep(0.02)

    worker_factory(SpyExecutor(action=slow), heartbeat_seconds=0.05).run_once()

    assert len(beats) == 2 and beats[1] > beats[0]
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_losing_the_task_stops_its_execution(project, task_factory, worker_factory):
    task = task_factory(project)
    seen = {}

    def taken_over(request, control):
        Task.objects.filter(pk=request.task_id).update(worker_id="another-worker")
        deadline = time.monotonic() + 5
        while not control.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["cancelled"] = control.cancelled

    report = worker_factory(SpyExecutor(action=taken_over), heartbeat_seconds=0.05).run_once()

    assert seen == {"cancelled": True}
    assert [run.outcome for run in report.runs] == ["discarded"]
    task.refresh_from_db()
    assert task.worker_id == "another-worker"
    assert task.status == TaskStatus.RUNNING


def test_a_failing_round_is_logged_and_the_worker_carries_on(
    project, task_factory, worker_factory, monkeypatch, caplog
):
    from worker import services

    task = task_factory(project)
    real_claim = services.task_claim_next
    calls = []

    def flaky_claim(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        claimed = real_claim(**kwargs)
        if claimed is None:
            worker.handle_signal(signal.SIGTERM)
        return claimed

    monkeypatch.setattr(services, "task_claim_next", flaky_claim)
    monkeypatch.setattr("worker.loop.Worker._sleep", lambda self, seconds: None)
    worker = worker_factory()

    with caplog.at_level(logging.ERROR, logger="worker.loop"):
        worker.run_forever()

    assert "round failed" in caplog.text
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
