"""A worker killed with SIGKILL: its task is re-queued by a worker busy in a long turn.

Real `manage.py run_worker` processes on the test's database (SQLite file or PostgreSQL).
Recovery runs from each worker's background thread every heartbeat, so it does not wait for
a round: the bound is WORKER_STALE_AFTER_SECONDS + one WORKER_HEARTBEAT_SECONDS after the
kill, checked on the time the recovery's audit event records (slack: one more heartbeat).
"""

import contextlib
import os
import shlex
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from django.utils import timezone

from controlplane.models import AuditEvent, Task, TaskStatus
from tests.worker.conftest import SpyExecutor, processes_running, wait_for
from worker.models import TaskRun

pytestmark = pytest.mark.django_db(transaction=True)

STALE_SECONDS = 3
HEARTBEAT_SECONDS = 1


@pytest.fixture
def long_agent(tmp_path):
    """A `command` agent that marks its start in `agents/` and sleeps for a minute; every
    agent still alive is killed after."""
    pid_dir = tmp_path / "agents"
    pid_dir.mkdir()
    script = tmp_path / "long_agent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time, uuid
            sys.stdin.read()
            open(os.path.join({str(pid_dir)!r}, uuid.uuid4().hex), "w").close()
            time.sleep(60)
            print("long agent finished")
            """
        )
    )
    yield f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    for pid in processes_running(str(script)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _agent_processes(worker_pid: int, script: str) -> list[int]:
    """The processes under `worker_pid` (its sandbox's and its agent's) running `script`."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    tree, stack = [], [worker_pid]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, []))
    return sorted(set(tree) & set(processes_running(script)))


def _running_under(db, task_id, worker_id, procs):
    wait_for(
        lambda: db.tasks().filter(pk=task_id, status=TaskStatus.RUNNING, worker_id=worker_id),
        timeout=30,
        message=f"task {task_id} never ran under {worker_id}:\n{procs.logs()}",
    )


def test_a_killed_workers_task_is_requeued_within_the_bound_while_the_others_are_busy(
    shared_db, worker_processes, long_agent
):
    first, second = shared_db.seed_tasks(2)
    env = {
        "WORKER_COMMAND": long_agent,
        "WORKER_SANDBOX_WRITABLE": str(Path(shlex.split(long_agent)[1]).parent / "agents"),
        "WORKER_STALE_AFTER_SECONDS": str(STALE_SECONDS),
        "WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        "WORKER_PROGRESS_LOG_SECONDS": "1",
    }
    args = ("--executor", "command", "--poll-interval", "0.05")
    doomed = worker_processes.start(shared_db, *args, "--worker-id", "w1", env=env)
    _running_under(shared_db, first, "w1", worker_processes)
    busy = worker_processes.start(shared_db, *args, "--worker-id", "w2", env=env)
    _running_under(shared_db, second, "w2", worker_processes)

    script = shlex.split(long_agent)[1]
    started = Path(script).parent / "agents"
    wait_for(
        lambda: len(list(started.iterdir())) == 2,
        timeout=10,
        message=f"the agents never started:\n{worker_processes.logs()}",
    )
    doomed_agent = wait_for(lambda: _agent_processes(doomed.pid, script), timeout=10)
    busy_agent = wait_for(lambda: _agent_processes(busy.pid, script), timeout=10)
    killed_at = timezone.now()
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    # Its agent dies with it, sandbox and all (bubblewrap's --die-with-parent); the busy
    # worker's agent runs on.
    wait_for(
        lambda: not set(doomed_agent) & set(processes_running(script)),
        timeout=10,
        message=f"the killed worker's agent outlived it: {doomed_agent}",
    )
    assert set(busy_agent) <= set(processes_running(script))

    event = wait_for(
        lambda: (
            AuditEvent.objects.using(shared_db.alias)
            .filter(action="worker_task_recovered", target_id=str(first))
            .first()
        ),
        timeout=60,
        interval=0.1,
        message=f"the killed worker's task was never recovered:\n{worker_processes.logs()}",
    )
    seconds = (event.created_at - killed_at).total_seconds()
    print(f"\nkill to re-queue: {seconds:.2f}s (bound {STALE_SECONDS + HEARTBEAT_SECONDS}s)")
    assert seconds <= STALE_SECONDS + HEARTBEAT_SECONDS + HEARTBEAT_SECONDS, worker_processes.logs()
    # Not early either: the last heartbeat was older than the stale threshold.
    last_heartbeat = timezone.datetime.fromisoformat(event.data["last_heartbeat_at"])
    assert (event.created_at - last_heartbeat).total_seconds() >= STALE_SECONDS
    # Found by the other worker while it was busy in its own long turn.
    assert event.actor_label == "worker:w2"
    assert event.data["stale_worker_id"] == "w1"
    assert busy.poll() is None
    assert shared_db.tasks().get(pk=second).status == TaskStatus.RUNNING
    task = shared_db.tasks().get(pk=first)
    assert (task.status, task.is_resume, task.turn, task.worker_id) == (
        TaskStatus.QUEUED,
        True,
        1,
        "",
    )

    # Claimed again: a fresh worker runs it as a resume of the same turn.
    again = worker_processes.start(shared_db, "--once", "--executor", "echo", "--worker-id", "w3")
    assert worker_processes.wait(again, timeout=60) == 0, worker_processes.log(again)
    task = shared_db.tasks().get(pk=first)
    assert task.status == TaskStatus.COMPLETED
    runs = TaskRun.objects.using(shared_db.alias).filter(task_id=first).order_by("id")
    assert [(r.worker_id, r.outcome, r.is_resume) for r in runs] == [
        ("w1", "lost", False),
        ("w3", "completed", True),
    ]

    # The lines carry the worker and task ids: start, progress, recovery.
    doomed_log, busy_log = worker_processes.log(doomed), worker_processes.log(busy)
    assert (
        f"[worker=w1 task={first}]: task {first} turn 1: started (executor command, user "
        in doomed_log
    )
    assert f"[worker=w2 task={second}]: task {second} turn 1 still running after" in busy_log
    assert f"[worker=w2]: task {first} turn 1: worker w1 stopped heart-beating" in busy_log


# In-process, so on PostgreSQL only: SQLite's shared in-memory test database refuses a
# thread's write while another thread reads ("database table is locked") instead of waiting.
@pytest.mark.postgres
def test_a_worker_busy_in_a_turn_recovers_a_stale_task_without_waiting_for_a_round(
    project, task_factory, worker_factory
):
    # Fresh when the round starts (a loaded machine may take a second or two to get there),
    # stale three seconds into the turn.
    dead = task_factory(
        project,
        status=TaskStatus.RUNNING,
        worker_id="w-dead",
        heartbeat_at=timezone.now(),
    )
    mine = task_factory(project)
    seen = {}

    def long_turn(request, control):
        if request.task_id == dead.pk:
            return  # its resume, claimed again in the same round
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if Task.objects.filter(pk=dead.pk, status=TaskStatus.QUEUED).exists():
                seen["recovered during the turn of"] = request.task_id
                return
            time.sleep(0.02)

    worker = worker_factory(
        SpyExecutor(action=long_turn), heartbeat_seconds=0.05, stale_after_seconds=3
    )
    report = worker.run_once()

    assert report.recovered == []  # not by the round's own recovery
    assert seen == {"recovered during the turn of": mine.pk}
    assert [(run.task_id, run.outcome) for run in report.runs] == [
        (mine.pk, "completed"),
        (dead.pk, "completed"),
    ]
    event = AuditEvent.objects.get(action="worker_task_recovered", target_id=str(dead.pk))
    assert event.actor_label == "worker:test-worker"
