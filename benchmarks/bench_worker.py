#!/usr/bin/env python
"""Worker throughput with the `echo` executor: tasks per second for 1 and 4 workers on
PostgreSQL and 1 worker on SQLite.

Each scenario gets a throwaway database (a PostgreSQL database `bench_worker_<pid>_<n>`,
dropped at the end, or a SQLite file in a temporary directory), migrated and filled with N
queued tasks; then W `manage.py run_worker --once --executor echo` processes drain it.

Two figures per scenario:
- "processing": N / (last task finished - first task claimed), from the task rows; the
  steady-state rate, without process start-up;
- "wall": N / (time from starting the workers to the last one exiting), start-up (Django
  import, connecting) and the end-of-round memory sweep included.

Usage: .venv/bin/python benchmarks/bench_worker.py [--tasks 2000]
           [--pg-url postgres://postgres@127.0.0.1:5432/postgres] [--no-postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
MANAGE = str(BASE_DIR / "manage.py")


def _env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(BASE_DIR),
    }


def _django(database_url: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args],
        cwd=BASE_DIR,
        env=_env(database_url),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def seed(count: int) -> None:
    """(In a child with DATABASE_URL set.) Queue `count` echo tasks."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from controlplane.models import Membership, Project, Quota, Role, Task

    user = get_user_model().objects.create_user(username="bench")
    Quota.objects.create(user=user, monthly_limit_usd=None)
    project = Project.objects.create(name="bench", created_by=user)
    Membership.objects.create(project=project, user=user, role=Role.OWNER)
    now = timezone.now()
    Task.objects.bulk_create(
        [
            Task(project=project, user=user, prompt=f"benchmark task {i}", queued_at=now)
            for i in range(count)
        ],
        batch_size=1000,
    )


def report() -> None:
    """(In a child.) Print how many tasks completed and the processing window, as JSON."""
    import django

    django.setup()
    from django.db.models import Count, Max, Min

    from controlplane.models import Task
    from worker.models import TaskRun

    runs = TaskRun.objects.aggregate(first=Min("started_at"), runs=Count("id"))
    tasks = Task.objects.aggregate(last=Max("finished_at"))
    completed = Task.objects.filter(status="completed").count()
    left = Task.objects.exclude(status="completed").count()
    window = (tasks["last"] - runs["first"]).total_seconds() if runs["first"] else None
    print(
        json.dumps({"completed": completed, "left": left, "runs": runs["runs"], "window": window})
    )


def run_scenario(label: str, database_url: str, *, tasks: int, workers: int) -> dict:
    _django(database_url, MANAGE, "migrate", "--verbosity", "0")
    _django(database_url, __file__, "_seed", str(tasks))
    return drain(label, database_url, tasks=tasks, workers=workers)


def drain(
    label: str, database_url: str, *, tasks: int, workers: int, report_script: str = __file__
) -> dict:
    """Start `workers` `run_worker --once` processes on the queued tasks and wait for them.

    Returns the figures `report_script _report` prints, with the label, counts and wall time.
    """
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                MANAGE,
                "run_worker",
                "--once",
                "--executor",
                "echo",
                "--worker-id",
                f"bench-{i}",
            ],
            cwd=BASE_DIR,
            env=_env(database_url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    errors = []
    for proc in procs:
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            errors.append(stderr[-2000:])
    wall = time.monotonic() - started
    if errors:
        raise SystemExit(f"{label}: a worker failed:\n" + "\n".join(errors))
    figures = json.loads(_django(database_url, report_script, "_report").strip().splitlines()[-1])
    figures.update(label=label, tasks=tasks, workers=workers, wall=wall)
    return figures


def _admin(pg_url: str):
    import psycopg

    return psycopg.connect(_libpq(pg_url), autocommit=True)


def _libpq(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def _with_db(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def postgres_scenario(pg_url: str, *, tasks: int, workers: int, n: int) -> dict:
    name = f"bench_worker_{os.getpid()}_{n}"
    with _admin(pg_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        return run_scenario(
            f"PostgreSQL, {workers} worker{'s' if workers > 1 else ''}",
            _with_db(pg_url, name),
            tasks=tasks,
            workers=workers,
        )
    finally:
        with _admin(pg_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlite_scenario(*, tasks: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_worker_") as tmp:
        return run_scenario(
            f"SQLite, {workers} worker{'s' if workers > 1 else ''}",
            f"sqlite:///{Path(tmp) / 'bench.sqlite3'}",
            tasks=tasks,
            workers=workers,
        )


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    sys.path.insert(0, str(BASE_DIR))
    if len(sys.argv) == 3 and sys.argv[1] == "_seed":
        return seed(int(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "_report":
        return report()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="A PostgreSQL server URL whose user may create databases.",
    )
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()

    results = []
    if not args.no_postgres:
        results.append(postgres_scenario(args.pg_url, tasks=args.tasks, workers=1, n=1))
        results.append(postgres_scenario(args.pg_url, tasks=args.tasks, workers=4, n=4))
    results.append(sqlite_scenario(tasks=args.tasks, workers=1))

    print(f"echo executor, {args.tasks} tasks per scenario, {os.cpu_count()} CPUs")
    print(f"{'scenario':<24}{'processing':>16}{'wall':>16}  check")
    for r in results:
        processing = r["tasks"] / r["window"] if r["window"] else float("nan")
        ok = "ok" if r["completed"] == r["tasks"] and r["runs"] == r["tasks"] else "MISMATCH"
        print(
            f"{r['label']:<24}{processing:>10.0f} task/s{r['tasks'] / r['wall']:>10.0f} task/s"
            f"  {ok} ({r['completed']} completed, {r['runs']} runs, {r['left']} left)"
        )


if __name__ == "__main__":
    main()
