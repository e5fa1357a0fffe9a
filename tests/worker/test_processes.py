"""Real `manage.py run_worker` processes: --once, signals, and many workers on PostgreSQL."""

import shlex
import signal
import sys
import textwrap
import time
from collections import Counter

import pytest

from controlplane.models import TaskStatus
from tests.worker.conftest import processes_running, wait_for
from worker.models import TaskRun, WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)


def _slow_agent(tmp_path, seconds: float) -> str:
    """A command agent that says it started (a file in `tmp_path/out`, the one folder of the
    test it may write in its sandbox), sleeps, then answers."""
    script = tmp_path / "slow_agent.py"
    (tmp_path / "out").mkdir(exist_ok=True)
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            text = sys.stdin.read()
            open({str(tmp_path / "out" / "agent.pid")!r}, "w").write(str(os.getpid()))
            time.sleep({seconds})
            print("slow agent finished: " + text)
            """
        )
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def _wait_running(db, task_id, procs, proc):
    wait_for(
        lambda: db.tasks().get(pk=task_id).status == TaskStatus.RUNNING,
        timeout=30,
        message=f"task never started:\n{procs.log(proc)}",
    )


def test_once_processes_every_queued_task_and_exits_0(shared_db, worker_processes):
    ids = shared_db.seed_tasks(12)

    proc = worker_processes.start(shared_db, "--once", "--executor", "echo", "--worker-id", "w1")

    assert worker_processes.wait(proc, timeout=60) == 0, worker_processes.log(proc)
    tasks = shared_db.tasks().filter(pk__in=ids)
    assert {t.status for t in tasks} == {TaskStatus.COMPLETED}
    assert {t.result_text for t in tasks} == {f"task {i}" for i in range(12)}
    assert WorkerProcess.objects.using(shared_db.alias).get(worker_id="w1").stopped_at
    log = worker_processes.log(proc)
    assert f"task {ids[0]} turn 1: completed in" in log


def test_an_unknown_executor_is_refused(shared_db, worker_processes):
    proc = worker_processes.start(shared_db, "--once", "--executor", "nope")
    assert worker_processes.wait(proc, timeout=60) != 0
    assert "unknown executor 'nope'" in worker_processes.log(proc)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_first_signal_lets_the_running_task_finish(shared_db, worker_processes, tmp_path, signum):
    [task_id] = shared_db.seed_tasks(1, prompt="slow one")
    proc = worker_processes.start(
        shared_db,
        "--executor",
        "command",
        "--poll-interval",
        "0.05",
        env={
            "WORKER_COMMAND": _slow_agent(tmp_path, 1.5),
            "WORKER_SANDBOX_WRITABLE": str(tmp_path / "out"),
        },
    )
    _wait_running(shared_db, task_id, worker_processes, proc)

    proc.send_signal(signum)

    assert worker_processes.wait(proc, timeout=30) == 0, worker_processes.log(proc)
    task = shared_db.tasks().get(pk=task_id)
    assert task.status == TaskStatus.COMPLETED, worker_processes.log(proc)
    assert task.result_text == "slow agent finished: slow one"


def test_a_second_signal_kills_the_agent_and_requeues_the_task_as_a_resume(
    shared_db, worker_processes, tmp_path
):
    [task_id] = shared_db.seed_tasks(1, prompt="very slow one")
    proc = worker_processes.start(
        shared_db,
        "--executor",
        "command",
        "--poll-interval",
        "0.05",
        env={
            "WORKER_COMMAND": _slow_agent(tmp_path, 60),
            "WORKER_SANDBOX_WRITABLE": str(tmp_path / "out"),
        },
    )
    _wait_running(shared_db, task_id, worker_processes, proc)
    pid_file = tmp_path / "out" / "agent.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=30)

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)

    assert worker_processes.wait(proc, timeout=20) == 1, worker_processes.log(proc)
    assert time.monotonic() - started < 15
    # The agent is gone, sandbox and all (its pid inside the sandbox is not the host's).
    assert processes_running(str(tmp_path / "slow_agent.py")) == []
    task = shared_db.tasks().get(pk=task_id)
    assert (task.status, task.is_resume, task.turn, task.worker_id) == (
        TaskStatus.QUEUED,
        True,
        1,
        "",
    )

    # Not lost: the next worker picks it up as a resume of the same turn.
    again = worker_processes.start(shared_db, "--once", "--executor", "echo")
    assert worker_processes.wait(again, timeout=60) == 0, worker_processes.log(again)
    task = shared_db.tasks().get(pk=task_id)
    assert task.status == TaskStatus.COMPLETED
    runs = TaskRun.objects.using(shared_db.alias).filter(task_id=task_id)
    assert [(r.outcome, r.is_resume) for r in runs] == [("requeued", False), ("completed", True)]


@pytest.mark.postgres
def test_four_workers_run_400_tasks_exactly_once(shared_db, worker_processes):
    workers = [
        worker_processes.start(
            shared_db, "--executor", "echo", "--poll-interval", "0.02", "--worker-id", f"w{i}"
        )
        for i in range(4)
    ]
    wait_for(
        lambda: WorkerProcess.objects.using(shared_db.alias).count() == 4,
        timeout=60,
        message=f"workers did not start:\n{worker_processes.logs()}",
    )

    ids = shared_db.seed_tasks(400)
    wait_for(
        lambda: (
            not shared_db.tasks()
            .filter(status__in=[TaskStatus.QUEUED, TaskStatus.RUNNING])
            .exists()
        ),
        timeout=120,
        interval=0.1,
        message=f"tasks left behind:\n{worker_processes.logs()}",
    )
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        assert worker_processes.wait(proc, timeout=30) == 0, worker_processes.logs()

    tasks = shared_db.tasks().filter(pk__in=ids)
    assert Counter(t.status for t in tasks) == {TaskStatus.COMPLETED: 400}
    assert all(t.result_text == t.prompt for t in tasks)
    runs = TaskRun.objects.using(shared_db.alias).filter(task_id__in=ids)
    per_task = Counter(runs.values_list("task_id", flat=True))
    assert len(per_task) == 400
    assert set(per_task.values()) == {1}, "a task ran more than once"
    assert set(runs.values_list("outcome", flat=True)) == {"completed"}
    by_worker = Counter(runs.values_list("worker_id", flat=True))
    assert len(by_worker) >= 2, f"no concurrency happened: {by_worker}"
