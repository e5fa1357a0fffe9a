"""A worker that starts while the database is unreachable waits for it (one warning, retries
with back-off up to 30 s, one line when it is back) and then works: every role, `--once`
too. A signal during the wait exits cleanly. The API's readiness probe says 503 meanwhile.

The PostgreSQL cluster is a throwaway one of the test's own (`tests/throwaway.py`), stopped
before the workers start and started a few seconds later.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from controlplane.models import TaskStatus
from tests.throwaway import free_port
from tests.worker.conftest import SharedDatabase, wait_for
from tests.worker.test_faults import throwaway_db  # noqa: F401  (the fixture)

TASKS = 12
WAITING = "start-up: database unreachable"
BACK = "start-up: database reachable again"
# The probe: a long-lived process asking /readyz every 0.2 s through Django's request cycle
# (connections opened and closed as a server's), one status per line.
PROBE = """
import sys, time, django
django.setup()
from django.test import Client
client = Client()
with open(sys.argv[1], "a", buffering=1) as out:
    while True:
        out.write(f"{client.get('/readyz').status_code}\\n")
        time.sleep(0.2)
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _done(db: SharedDatabase, ids: list[int]) -> bool:
    try:
        return db.tasks().filter(pk__in=ids, status=TaskStatus.COMPLETED).count() == len(ids)
    except Exception:
        connections[db.alias].close()
        return False


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_workers_started_while_postgres_is_down_wait_then_run_the_queue(
    throwaway_db,  # noqa: F811
    worker_processes,
    tmp_path,
):
    db = throwaway_db
    ids = db.seed_tasks(TASKS)
    connections[db.alias].close()
    db.cluster.stop()
    stopped = time.monotonic()

    env = {"WORKER_COMMAND": "echo ok", "AUTOMEMORY_SWEEP_INTERVAL_SECONDS": "1"}
    common = ("--executor", "command", "--poll-interval", "0.1")
    forever = worker_processes.start(db, *common, "--worker-id", "w-all", env=env)
    once = worker_processes.start(
        db, *common, "--once", "--role", "tasks", "--worker-id", "w-once", env=env
    )
    sweeper = worker_processes.start(db, "--role", "sweeper", "--worker-id", "w-sw", env=env)
    workers = [forever, once, sweeper]
    readiness = tmp_path / "readiness.txt"
    probe_errors = (tmp_path / "readiness.err").open("wb")
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(readiness)],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DATABASE_URL": db.url, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=probe_errors,
    )

    def until(predicate, what: str, timeout: float = 120) -> None:
        """Poll for `predicate`; on a timeout, say what was seen by then."""
        try:
            wait_for(predicate, timeout=timeout, interval=0.1)
        except AssertionError:
            errors = (tmp_path / "readiness.err").read_text(errors="replace")[-5000:]
            raise AssertionError(
                f"{what} in {timeout:g}s; readiness {_lines(readiness)[-20:]} {errors}\n"
                f"{worker_processes.logs()}"
            ) from None

    try:
        until(lambda: all(WAITING in worker_processes.log(p) for p in workers), "no waiting line")
        until(lambda: len(_lines(readiness)) >= 3, "no readiness answers")
        assert [p.poll() for p in workers] == [None, None, None], worker_processes.logs()
        time.sleep(3)  # the outage goes on: the workers retry meanwhile
        assert [p.poll() for p in workers] == [None, None, None], worker_processes.logs()
        down = _lines(readiness)
        assert set(down) == {"503"}, down
        down_seconds = time.monotonic() - stopped

        db.cluster.start()
        restarted = time.monotonic()

        until(lambda: _done(db, ids), "the tasks were not done", timeout=180)
        settled = time.monotonic() - restarted
        assert worker_processes.wait(once, timeout=120) == 0, worker_processes.log(once)
        until(lambda: _lines(readiness)[-1:] == ["200"], "readiness did not turn 200")
        until(lambda: BACK in worker_processes.log(sweeper), "the sweeper did not come back")
    finally:
        probe.kill()
        probe.wait()
        probe_errors.close()
    for proc in (forever, sweeper):
        proc.send_signal(signal.SIGTERM)
    assert [worker_processes.wait(p, timeout=120) for p in (forever, sweeper)] == [0, 0]

    print(
        f"\nPostgreSQL down {down_seconds:.1f}s as 3 workers started (all, --once, sweeper):"
        f" {TASKS} tasks done {settled:.1f}s after it came back; readiness {len(down)} x 503"
    )
    for line in worker_processes.logs().splitlines():
        if "start-up" in line:
            print("   ", line)
    for proc in workers:
        log = worker_processes.log(proc)
        assert log.count(WAITING) == 1, log  # once, however many retries
        assert log.count(BACK) == 1, log
        assert "Traceback" not in log, log


@pytest.mark.parametrize("once", [False, True], ids=["forever", "once"])
@pytest.mark.parametrize("role", ["all", "sweeper"])
def test_a_signal_while_waiting_for_the_database_exits_cleanly(
    worker_processes, tmp_path, role, once
):
    # Nothing listens on this port: every connection is refused at once.
    db = SharedDatabase(alias="unused", url=f"postgres://postgres@127.0.0.1:{free_port()}/x")
    args = ["--role", role, "--worker-id", "w-wait", *(["--once"] if once else [])]
    proc = worker_processes.start(db, *args)
    try:
        wait_for(lambda: WAITING in worker_processes.log(proc), timeout=120, interval=0.1)
    except AssertionError:
        raise AssertionError(f"no waiting line:\n{worker_processes.log(proc)}") from None
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert worker_processes.wait(proc, timeout=60) == 0
    log = worker_processes.log(proc)
    assert log.count(WAITING) == 1, log
    assert "stopped before the database was reachable" in log
    assert "Traceback" not in log, log
