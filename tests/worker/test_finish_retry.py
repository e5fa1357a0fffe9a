"""A turn whose agent finished while the database was unreachable: the result is kept, the
finish retried (same fence, same `finished_at`) and written once; a task taken over meanwhile
is not written; one warning per outage. The outage here is a connection error raised in
front of the real services; tests/worker/test_faults.py stops a real PostgreSQL."""

import logging
import time
from datetime import timedelta

import pytest
from django.db import OperationalError

from controlplane import selectors
from controlplane.models import TaskStatus, UsageRecord
from tests.worker.conftest import SpyExecutor
from worker import faults, services
from worker.models import TaskRun
from worker.threads import Heartbeat

CUT = "server closed the connection unexpectedly"


@pytest.fixture
def no_backoff(monkeypatch):
    """Retries without waiting (the back-off itself is not what these tests look at)."""
    monkeypatch.setattr(faults, "_sleep", lambda seconds, should_stop: None)


def flaky(monkeypatch, name: str, *, failures: int, before=None, commit_first=False):
    """`services.<name>` failing `failures` times with a connection error, then real; calls
    `before(attempt)` first; `commit_first`: the first attempt commits, then its reply is lost."""
    real = getattr(services, name)
    calls = []

    def call(**kwargs):
        calls.append(kwargs)
        if before:
            before(len(calls))
        if commit_first and len(calls) == 1:
            real(**kwargs)
            raise OperationalError(CUT)
        if len(calls) <= failures:
            raise OperationalError(CUT)
        return real(**kwargs)

    monkeypatch.setattr(services, name, call)
    return calls


def test_a_finish_that_meets_an_outage_is_retried_and_written_once(
    project, task_factory, worker_factory, monkeypatch, no_backoff, caplog
):
    task = task_factory(project)
    calls = flaky(monkeypatch, "task_finish", failures=3)
    executor = SpyExecutor()

    with caplog.at_level(logging.INFO, logger="worker.loop"):
        report = worker_factory(executor).run_round()

    assert [run.outcome for run in report.runs] == ["completed"]
    assert len(executor.requests) == 1  # the agent ran once
    assert len(calls) == 4 and len({call["now"] for call in calls}) == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.finished_at == calls[0]["now"]
    assert UsageRecord.objects.filter(task=task).count() == 1
    assert list(TaskRun.objects.filter(task=task).values_list("outcome", flat=True)) == [
        "completed"
    ]
    assert caplog.text.count("database unreachable") == 1
    assert "Traceback" not in caplog.text
    assert f"finish of task {task.pk} turn 1 recorded after" in caplog.text
    assert "database reachable again" in caplog.text


def test_a_finish_whose_reply_was_lost_is_not_written_again(
    project, task_factory, worker_factory, monkeypatch, no_backoff
):
    task = task_factory(project)
    calls = flaky(monkeypatch, "task_finish", failures=0, commit_first=True)

    report = worker_factory().run_round()

    assert [run.outcome for run in report.runs] == ["completed"]
    assert len(calls) == 2
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert UsageRecord.objects.filter(task=task).count() == 1
    assert TaskRun.objects.filter(task=task).count() == 1


def test_a_task_taken_over_during_the_outage_is_not_written_by_the_old_worker(
    project, task_factory, worker_factory, monkeypatch, no_backoff, caplog
):
    task = task_factory(project)

    def taken_over(attempt):
        if attempt == 2:  # the database is back, but another worker recovered and claimed it
            recovered = services.tasks_recover_stale(stale_after=timedelta(hours=-1))
            assert recovered == [task.pk]
            assert services.task_claim_next(worker_id="other-worker") is not None

    flaky(monkeypatch, "task_finish", failures=1, before=taken_over)

    with caplog.at_level(logging.INFO, logger="worker.loop"):
        report = worker_factory().run_round()

    assert [(run.task_id, run.outcome) for run in report.runs] == [(task.pk, "discarded")]
    assert "not written: the task is no longer held" in caplog.text
    task.refresh_from_db()
    assert (task.status, task.worker_id) == (TaskStatus.RUNNING, "other-worker")
    assert not UsageRecord.objects.filter(task=task).exists()
    assert list(TaskRun.objects.filter(task=task).values_list("outcome", flat=True)) == ["lost"]


def test_after_finish_retry_seconds_the_result_is_dropped_and_the_task_left_to_recovery(
    project, task_factory, worker_factory, monkeypatch, no_backoff, caplog
):
    task = task_factory(project)
    flaky(monkeypatch, "task_finish", failures=10**6)

    with caplog.at_level(logging.INFO, logger="worker.loop"):
        report = worker_factory(finish_retry_seconds=0).run_round()

    assert [run.outcome for run in report.runs] == ["unrecorded"]
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING  # recovered once stale, as before
    assert not UsageRecord.objects.filter(task=task).exists()
    assert "could not be recorded" in caplog.text


def test_a_second_signal_stops_the_retries(
    project, task_factory, worker_factory, monkeypatch, no_backoff
):
    task_factory(project)
    worker = worker_factory()

    def second_signal(attempt):
        if attempt == 3:
            worker.aborting = True

    flaky(monkeypatch, "task_finish", failures=10**6, before=second_signal)

    report = worker.run_round()

    assert [run.outcome for run in report.runs] == ["unrecorded"]


def test_the_preparation_waits_for_the_database_and_the_agent_runs_once(
    project, task_factory, worker_factory, monkeypatch, no_backoff
):
    task = task_factory(project)
    real = selectors.thread_usage_get
    calls = []

    def flaky_read(**kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise OperationalError(CUT)
        return real(**kwargs)

    monkeypatch.setattr(selectors, "thread_usage_get", flaky_read)
    executor = SpyExecutor()

    report = worker_factory(executor).run_round()

    assert [run.outcome for run in report.runs] == ["completed"]
    assert len(calls) == 3 and len(executor.requests) == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED


def test_an_error_that_is_not_the_database_is_not_retried(
    project, task_factory, worker_factory, monkeypatch, no_backoff
):
    task_factory(project)
    calls = []

    def broken(**kwargs):
        calls.append(1)
        raise ValueError("a bug")

    monkeypatch.setattr(services, "task_finish", broken)

    with pytest.raises(ValueError):
        worker_factory().run_round()
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_warns_once_per_outage_and_beats_again_after_it(
    project, task_factory, monkeypatch, caplog
):
    task = task_factory(project)
    claim = services.task_claim_next(worker_id="w1")
    calls = flaky(monkeypatch, "task_heartbeat", failures=6)
    control = type("Control", (), {"cancel": lambda self: None})()

    with (
        caplog.at_level(logging.INFO, logger="worker.loop"),
        Heartbeat(
            task_id=task.pk,
            worker_id="w1",
            claimed_at=claim.task.claimed_at,
            interval=0.02,
            control=control,
        ) as heartbeat,
    ):
        deadline = time.monotonic() + 10
        while len(calls) < 9 and time.monotonic() < deadline:
            time.sleep(0.02)

    assert len(calls) >= 9 and not heartbeat.lost
    task.refresh_from_db()
    assert task.heartbeat_at > claim.task.heartbeat_at
    assert caplog.text.count("database unreachable") == 1
    assert caplog.text.count("database reachable again") == 1
    assert "Traceback" not in caplog.text
