#!/usr/bin/env python
"""Worker throughput with the `echo` executor: tasks per second for 1 and 4 workers on
PostgreSQL and 1 worker on SQLite.

Each scenario gets a throwaway database (a PostgreSQL database created on the server named,
dropped at the end, or a SQLite file in a temporary directory), migrated and filled with N
queued tasks; then W `manage.py run_worker --once --executor echo` processes drain it.

Two figures per scenario:
- "processing": N / (last task finished - first task claimed), from the task rows; the
  steady-state rate, without process start-up;
- "wall": N / (time from starting the workers to the last one exiting), start-up (Django
  import, connecting) and the end-of-round memory sweep included.

    .venv/bin/python benchmarks/bench_worker.py                # PostgreSQL on 127.0.0.1, SQLite
    .venv/bin/python benchmarks/bench_worker.py --no-postgres  # SQLite only
    .venv/bin/python benchmarks/bench_worker.py --tasks 500 --postgres URL   # another server

`--save` writes the output to docs/figures/bench_worker.txt.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import harness

LOCAL_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"


def seed(count: int) -> None:
    """(In a child on its database.) Queue `count` echo tasks of an unlimited user."""
    harness.setup_django()
    owner = harness.user_create("bench", limit_usd=None)
    harness.tasks_queue(harness.project_create(owner), owner, count)


def report() -> None:
    """(In a child.) Print how many tasks completed and the processing window, as JSON."""
    harness.setup_django()
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
                harness.MANAGE,
                "run_worker",
                "--once",
                "--executor",
                "echo",
                "--worker-id",
                f"bench-{i}",
            ],
            cwd=harness.BASE_DIR,
            env=harness.child_env(database_url),
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
    output = harness.child_output(report_script, database_url, "_report")
    figures = json.loads(output.strip().splitlines()[-1])
    figures.update(label=label, tasks=tasks, workers=workers, wall=wall)
    return figures


def scenario(databases: harness.Databases, *, tasks: int, workers: int) -> dict:
    url = databases.new(f"worker_{workers}")
    harness.child_output(harness.MANAGE, url, "migrate", "--verbosity", "0")
    harness.child_output(__file__, url, "_seed", str(tasks))
    vendor = "PostgreSQL" if databases.postgres_url else "SQLite"
    label = f"{vendor}, {workers} worker{'s' if workers > 1 else ''}"
    return drain(label, url, tasks=tasks, workers=workers)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "_seed":
        return seed(int(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "_report":
        return report()
    parser = harness.parser(__doc__, database=False)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=harness.postgres_from_environment() or LOCAL_POSTGRES,
        help=f"a PostgreSQL server URL whose user may create databases (default {LOCAL_POSTGRES})",
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()

    with harness.run(args, database=False) as bench:
        results = []
        if not args.no_postgres:
            postgres = harness.Databases(args.postgres)
            bench.note_database("postgresql", harness.postgres_version(args.postgres))
            try:
                for workers in (1, 4):
                    results.append(scenario(postgres, tasks=args.tasks, workers=workers))
            finally:
                postgres.close()
        sqlite = harness.Databases(None)
        bench.note_database("sqlite", sqlite3.sqlite_version)
        try:
            results.append(scenario(sqlite, tasks=args.tasks, workers=1))
        finally:
            sqlite.close()

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
