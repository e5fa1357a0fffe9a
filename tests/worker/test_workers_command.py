"""`manage.py workers`, worker liveness, and worker counters shared through a metrics directory."""

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from controlplane.models import TaskStatus
from worker import processes
from worker.models import WorkerProcess

from .conftest import BASE_DIR, SpyExecutor, wait_for


def workers(*args: str) -> str:
    out = StringIO()
    call_command("workers", *args, stdout=out)
    return out.getvalue()


def rows(output: str) -> dict[str, list[str]]:
    """Each table row split on runs of spaces, by worker id (the header dropped)."""
    lines = output.splitlines()
    assert lines[0].split()[:3] == ["WORKER", "STATE", "EXECUTOR"]
    return {line.split()[0]: line.split() for line in lines[1:]}


@pytest.fixture
def three_workers(db, project, task_factory):
    now = timezone.now()
    processes.worker_register(worker_id="w-alive", executor="codex", now=now - timedelta(hours=1))
    processes.worker_seen(worker_id="w-alive", now=now - timedelta(seconds=5))
    processes.worker_register(worker_id="w-silent", executor="echo", now=now - timedelta(hours=2))
    processes.worker_seen(worker_id="w-silent", now=now - timedelta(minutes=10))
    processes.worker_register(worker_id="w-done", executor="echo", now=now - timedelta(hours=3))
    processes.worker_stopped(worker_id="w-done", now=now - timedelta(hours=2))
    held = [task_factory(project, status=TaskStatus.RUNNING, worker_id="w-alive") for _ in "ab"]
    task_factory(project, status=TaskStatus.COMPLETED, worker_id="w-alive")
    task_factory(project, status=TaskStatus.RUNNING, worker_id="w-silent")
    return held


def test_it_lists_running_workers_with_their_state_heartbeat_and_tasks(three_workers):
    listed = rows(workers())

    assert set(listed) == {"w-alive", "w-silent"}
    alive = listed["w-alive"]
    assert alive[1:3] == ["alive", "codex"]
    assert alive[4] == str(os.getpid())
    assert "5s ago" in " ".join(alive)
    assert " ".join(alive).endswith(f"{three_workers[0].pk}, {three_workers[1].pk}")
    assert listed["w-silent"][1] == "stale"
    assert "600s ago" in " ".join(listed["w-silent"])


def test_all_adds_stopped_workers_newest_first(three_workers):
    output = workers("--all")
    assert list(rows(output)) == ["w-alive", "w-silent", "w-done"]
    assert rows(output)["w-done"][1] == "stopped"
    assert rows(output)["w-done"][-1] == "-"


def test_the_stale_threshold_is_the_recovery_setting(three_workers, settings):
    settings.WORKER_STALE_AFTER_SECONDS = 2
    assert rows(workers())["w-alive"][1] == "stale"
    settings.WORKER_STALE_AFTER_SECONDS = 3600
    assert rows(workers())["w-silent"][1] == "alive"


def test_json_output_carries_the_same_facts(three_workers):
    listed = {row["worker_id"]: row for row in json.loads(workers("--json", "--all"))}
    assert listed["w-alive"]["task_ids"] == [task.pk for task in three_workers]
    assert listed["w-alive"]["state"] == "alive"
    assert 4 <= listed["w-alive"]["seconds_since_seen"] < 60
    assert listed["w-done"]["stopped_at"] is not None
    assert listed["w-silent"]["pid"] == os.getpid()


def test_limit_and_an_empty_table(db):
    assert workers() == "No running workers.\n"
    assert workers("--all") == "No workers.\n"
    with pytest.raises(CommandError, match="--limit"):
        workers("--limit", "0")


def test_limit_keeps_the_newest(three_workers):
    assert list(rows(workers("--all", "--limit", "1"))) == ["w-alive"]


@pytest.mark.django_db(transaction=True)
def test_a_worker_inside_a_long_turn_is_seen_by_its_heartbeat(
    project, task_factory, worker_factory
):
    task_factory(project)
    worker = worker_factory(SpyExecutor(), worker_id="w-long", heartbeat_seconds=0.05)
    seen = []

    def long_turn(request, control):
        WorkerProcess.objects.filter(worker_id="w-long").update(
            last_seen_at=timezone.now() - timedelta(hours=1)
        )
        wait_for(
            lambda: (
                WorkerProcess.objects.get(worker_id="w-long").last_seen_at
                > timezone.now() - timedelta(seconds=5)
            ),
            timeout=5,
            message="the heartbeat did not mark the worker seen",
        )
        seen.append(rows(workers())["w-long"][1])

    worker.executor.action = long_turn
    worker.run_once()
    assert seen == ["alive"]


# --- Real processes -------------------------------------------------------------------------


def _manage(db_url: str, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), *args],
        cwd=BASE_DIR,
        env={**os.environ, "DATABASE_URL": db_url, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_turns_stale_and_its_counters_reach_the_api_scrape(
    shared_db, worker_processes, tmp_path
):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    shared = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    task_ids = shared_db.seed_tasks(3)
    proc = worker_processes.start(
        shared_db, "--worker-id", "w-proc", "--poll-interval", "0.2", env=shared
    )
    wait_for(
        lambda: shared_db.tasks().filter(pk__in=task_ids, status=TaskStatus.COMPLETED).count() == 3,
        timeout=60,
        message=worker_processes.logs(),
    )
    listed = rows(_manage(shared_db.url, "workers"))
    assert listed["w-proc"][1] == "alive"
    assert listed["w-proc"][4] == str(proc.pid)

    # The API process of the same host reads the worker's counters from the shared directory.
    scrape = (
        "from django.test import Client; "
        "print(Client().get('/metrics', REMOTE_ADDR='127.0.0.1').content.decode())"
    )

    def scraped_now() -> dict:
        text = _manage(
            shared_db.url,
            "shell",
            "--no-imports",
            "-c",
            scrape,
            env={**shared, "METRICS_ENABLED": "1"},
        )
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    # The round that completed the last task ends with a sweep, which counts itself after the
    # task's counters: scrape until it is there.
    sweeps = ("automemory_sweeps_total", (("scope", "all"),))
    scraped: dict = {}

    def sweep_counted() -> bool:
        scraped.clear()
        scraped.update(scraped_now())
        return scraped.get(sweeps, 0) >= 1

    wait_for(sweep_counted, timeout=60, message=worker_processes.logs())
    assert scraped[("worker_task_claims_total", (("executor", "echo"),))] == 3
    assert scraped[("worker_task_completions_total", (("executor", "echo"),))] == 3
    assert scraped[("automemory_sweeps_total", (("scope", "all"),))] >= 1
    assert scraped[("controlplane_queue_depth", ())] == 0

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    listed = rows(_manage(shared_db.url, "workers", env={"WORKER_STALE_AFTER_SECONDS": "0.5"}))
    assert listed["w-proc"][1] == "stale"
