#!/usr/bin/env python
"""Costs that must not grow with a user's history: worker throughput, the quota gate, the
worker's statements per claimed task (and the per-user memory sweep), at growing history.

Prints, for SQLite (a throwaway file) and, with --postgres, for PostgreSQL (throwaway
databases on the server named, dropped at the end):

1. worker throughput: `manage.py run_worker --once --executor echo` (one real worker process,
   as in bench_worker.py) draining N queued tasks of a user who has 0, then H completed tasks
   (each with its usage ledger row) this month; tasks per second (processing window, from the
   task rows) and the ratio (target >= 0.9);
2. the quota gate at 0, 10,000 and 100,000 completed tasks (and ledger rows) of history this
   month: `quota_statuses_get(user_ids=[...], now=...)` as the memory sweep calls it, and
   `task_quota_refusal` reading the quota for a user with a limit and for an unlimited one
   (the worker's claim reads it in its own statement); median milliseconds, queries, and
   the growth from no history to the most (target <= 1.5); and the statements one claimed
   task costs in a real `Worker` at each size;
3. statements per claimed task (claim, quota, injection, execute, finish; the round's
   sweep apart), against the targets: <= 8 for a user with a quota limit, <= 12 with an
   injection of 5 user and 5 project memories;
4. the per-user memory sweep at the same history sizes.

    .venv/bin/python benchmarks/bench_history.py                # SQLite only
    .venv/bin/python benchmarks/bench_history.py --postgres postgres://postgres@127.0.0.1:5432/postgres
    .venv/bin/python benchmarks/bench_history.py --tasks 1000 --history 50000 --skip-worker

`--save` writes the output to docs/figures/bench_history.txt.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys

import harness
from bench_worker import drain

QUEUED_PROMPT = "benchmark task"
LIMITED_USD = "1000000000"  # a limit, so the refusal reads the spend, never reached
REPEATS = 51


# --- Children (run on their database) ---------------------------------------------------------


class History:
    """A user with a project, whose history of completed tasks grows on demand.

    Each history task is completed earlier this month and has its `task_run` ledger row; the
    user's monthly total is rebuilt to match, as `usage_record` would have left it.
    """

    def __init__(self, username: str, *, limit_usd: str | None) -> None:
        from controlplane.models import Task

        self.user = harness.user_create(username, limit_usd=limit_usd)
        self.project = harness.project_create(self.user, f"{username} project")
        # What the worker checks a claimed task of this user with (only its user matters).
        self.probe = Task(project=self.project, user=self.user, prompt="probe")
        self.size = 0

    def grow_to(self, size: int) -> None:
        from datetime import timedelta
        from decimal import Decimal

        from django.db import transaction
        from django.utils import timezone

        from controlplane.models import Task, UsageRecord
        from controlplane.months import month_start
        from controlplane.services.usage import monthly_spend_verify

        now = timezone.now()
        start = month_start(now)
        count = size - self.size
        if count <= 0:
            return
        for offset in range(0, count, 5000):
            batch = min(5000, count - offset)
            with transaction.atomic():
                # Spread over the month so far: every one of them counts this month.
                finished = [
                    start + (now - start) * ((self.size + offset + i + 1) / (size + 1))
                    for i in range(batch)
                ]
                tasks = Task.objects.bulk_create(
                    [
                        Task(
                            project=self.project,
                            user=self.user,
                            prompt=f"history task {self.size + offset + i}",
                            status="completed",
                            started_at=when - timedelta(minutes=2),
                            finished_at=when,
                            result_text="done",
                            cost_usd=Decimal("0.0125"),
                            executor="echo",
                        )
                        for i, when in enumerate(finished)
                    ],
                    batch_size=1000,
                )
                UsageRecord.objects.bulk_create(
                    [
                        UsageRecord(
                            user=self.user,
                            task=task,
                            project=self.project,
                            turn=1,
                            executor="echo",
                            model="bench",
                            input_tokens=1000,
                            output_tokens=100,
                            cost_usd=Decimal("0.0125"),
                            finished_at=task.finished_at,
                        )
                        for task in tasks
                    ],
                    batch_size=1000,
                )
        monthly_spend_verify(fix=True, user_id=self.user.pk)
        self.size = size


def seed_worker(queued: int, history: int) -> None:
    """(Child.) A limited user with `history` completed tasks this month and `queued` new ones."""
    harness.setup_django()
    owner = History("bench", limit_usd=LIMITED_USD)
    owner.grow_to(history)
    harness.tasks_queue(owner.project, owner.user, queued, prompt=QUEUED_PROMPT + " {i}")


def report() -> None:
    """(Child.) The drained tasks' figures, as JSON (history tasks left out)."""
    harness.setup_django()
    from django.db.models import Count, Max, Min

    from controlplane.models import Task
    from worker.models import TaskRun

    queued = Task.objects.filter(prompt__startswith=QUEUED_PROMPT)
    runs = TaskRun.objects.aggregate(first=Min("started_at"), runs=Count("id"))
    last = queued.aggregate(last=Max("finished_at"))["last"]
    completed = queued.filter(status="completed").count()
    left = queued.exclude(status="completed").count()
    window = (last - runs["first"]).total_seconds() if runs["first"] and last else None
    print(
        json.dumps({"completed": completed, "left": left, "runs": runs["runs"], "window": window})
    )


def _median_ms(call, repeats: int = REPEATS) -> tuple[float, float, int]:
    """Median and best milliseconds of `call()` over `repeats` runs (after one warm-up), and
    its queries. On a busy machine the best is the steadier figure."""
    queries = harness.statements_of(call)
    timing = harness.timed(call, repeats=repeats, warmup=0)
    return timing.median_ms, timing.best_ms, queries


STATEMENT_TARGETS = {"plain": 8, "injection": 12}


def _statements_per_claimed_task(owner: History, *, tasks: int = 20) -> tuple[float, int]:
    """Statements one echo task costs in a real `Worker`, from its claim to its finish (claim,
    quota, injection, execute, finish; the round's sweep is not part of it), averaged over
    `tasks` claimed tasks; and those of the claim that finds the queue empty (once a round).
    """
    from worker.executors.echo import EchoExecutor
    from worker.loop import Worker

    harness.tasks_queue(owner.project, owner.user, tasks, prompt="probe")
    worker = Worker(executor=EchoExecutor(), worker_id="bench-probe", heartbeat_seconds=0)
    per_task = []
    while True:
        with harness.captured() as capture:
            claim = worker.claim_one()
            if claim is not None:
                worker.run_one(claim)
        if claim is None:
            return sum(per_task) / max(len(per_task), 1), capture.count
        per_task.append(capture.count)


def statements_section() -> None:
    """(Child.) Statements per claimed task against their targets, on this database."""
    from automemory.models import AutoMemorySettings
    from controlplane.models import IdentityMemory

    plain = History("statements-plain", limit_usd=LIMITED_USD)
    injected = History("statements-injection", limit_usd=LIMITED_USD)
    AutoMemorySettings.objects.create(user=injected.user, use_memories=True)
    for i in range(5):
        IdentityMemory.objects.create(scope="user", user=injected.user, content=f"pref {i}")
        IdentityMemory.objects.create(
            scope="project", project=injected.project, content=f"fact {i}"
        )
    rows = [
        ("plain", "quota limit, no injection", plain),
        ("injection", "quota limit, injection of 5 user + 5 project memories", injected),
    ]
    print("statements per claimed task (a real Worker, echo executor; the round's sweep apart):")
    for key, label, owner in rows:
        per_task, empty_claim = _statements_per_claimed_task(owner)
        target = STATEMENT_TARGETS[key]
        verdict = "ok" if per_task <= target else "OVER TARGET"
        print(f"  {label:<56} {per_task:5.1f}  (target <= {target}: {verdict})")
    print(f"  and once a round, the claim that finds the queue empty: {empty_claim}")


def gate(sizes: list[int]) -> None:
    """(Child.) The quota gate and the worker's refusal at each history size."""
    harness.setup_django()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from controlplane.services.quota import quota_statuses_get
    from worker.services import task_quota_refusal

    call_command("migrate", verbosity=0)
    limited = History("gate-limited", limit_usd=LIMITED_USD)
    unlimited = History("gate-unlimited", limit_usd=None)
    rows = []
    for size in sizes:
        limited.grow_to(size)
        unlimited.grow_to(size)
        now = timezone.now()
        sweep = _median_ms(lambda: quota_statuses_get(user_ids=[limited.user.pk], now=now))  # noqa: B023
        refusal = _median_ms(lambda: task_quota_refusal(task=limited.probe))
        refusal_unlimited = _median_ms(lambda: task_quota_refusal(task=unlimited.probe))
        per_task, _ = _statements_per_claimed_task(limited)
        rows.append((size, sweep, refusal, refusal_unlimited, per_task))

    print(f"quota gate on {connection.vendor}, median / best of {REPEATS} calls:")
    print(
        f"  {'history':>16}  {'quota_statuses_get':>28}  {'refusal (limit)':>28}"
        f"  {'refusal (unlimited)':>28}  {'statements/task':>20}"
    )
    for size, *figures, per_task in rows:
        cells = "".join(f"  {med:7.3f} / {best:6.3f} ms, {q} queries" for med, best, q in figures)
        print(f"  {f'{size:,} tasks':>16}{cells}  {per_task:20.1f}")
    first, last = rows[0], rows[-1]
    names = ("quota_statuses_get", "refusal (limit)", "refusal (unlimited)")
    growth = ", ".join(
        f"{name} x{b[0] / a[0]:.2f} median, x{b[1] / a[1]:.2f} best, queries {a[2]}->{b[2]}"
        for name, a, b in zip(names, first[1:4], last[1:4], strict=True)
    )
    print(f"  growth 0 -> {last[0]:,} (target <= 1.5): {growth}")
    statements_section()
    per_user_sweep_section(sizes=sizes)


# --- 4. The per-user memory sweep ------------------------------------------------------------
# SLOT: the auto memory benchmark (benchmarks/bench_automemory.py) adds its per-user sweep
# figures at 0 / 10k / 100k history here. Called once per database, after the quota gate,
# in the same child process (Django set up, database migrated).


def per_user_sweep_section(*, sizes: list[int]) -> None:
    """The per-user sweep at each history size (see the SLOT comment above)."""
    from bench_automemory import bench_user_sweep

    bench_user_sweep(sizes=sizes)


# --- The parent ---------------------------------------------------------------------------------


def worker_template(databases: harness.Databases, *, queued: int, history: int) -> str:
    """A migrated database holding the user's history and `queued` new tasks, to clone."""
    name = f"template_{history}"
    url = databases.new(name)
    harness.child_output(harness.MANAGE, url, "migrate", "--verbosity", "0")
    harness.child_output(__file__, url, "_seed_worker", str(queued), str(history))
    return name


def worker_scenario(database_url: str, *, label: str, queued: int, history: int) -> dict:
    figures = drain(label, database_url, tasks=queued, workers=1, report_script=__file__)
    figures["history"] = history
    return figures


def print_worker(vendor: str, results: list[dict]) -> None:
    """Each run, then the best rate per history size (the runs alternate, so a busy machine
    slows both sizes alike) and their ratio."""
    print(f"worker throughput on {vendor} (echo executor, 1 run_worker process):")
    best: dict[int, float] = {}
    for r in results:
        rate = r["tasks"] / r["window"] if r["window"] else float("nan")
        best[r["history"]] = max(best.get(r["history"], 0.0), rate)
        ok = "ok" if r["completed"] == r["tasks"] and r["runs"] == r["tasks"] else "MISMATCH"
        print(
            f"  {r['history']:>7,} tasks this month: {rate:7.1f} task/s processing, "
            f"{r['tasks'] / r['wall']:6.1f} task/s wall  {ok} ({r['completed']} completed)"
        )
    small, large = min(best), max(best)
    print(
        f"  best: {best[small]:.1f} task/s with {small:,}, {best[large]:.1f} task/s with "
        f"{large:,}: ratio {best[large] / best[small]:.2f} (target >= 0.9)"
    )


def run_backend(postgres_url: str | None, args) -> None:
    vendor = "PostgreSQL" if postgres_url else "SQLite"
    databases = harness.Databases(postgres_url)
    try:
        if not args.skip_worker:
            histories = (0, args.history)
            templates = {
                history: worker_template(databases, queued=args.tasks, history=history)
                for history in histories
            }
            results = [
                worker_scenario(
                    databases.new(f"worker_{history}_{attempt}", template=templates[history]),
                    label=f"{vendor}, {history} history",
                    queued=args.tasks,
                    history=history,
                )
                for attempt in range(args.rounds)
                for history in histories
            ]
            print_worker(vendor, results)
        if not args.skip_gate:
            url = databases.new("gate")  # the child migrates it
            harness.child(__file__, url, "_gate", ",".join(str(n) for n in args.gate_sizes))
    finally:
        databases.close()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "_seed_worker":
        return seed_worker(int(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) == 2 and sys.argv[1] == "_report":
        return report()
    if len(sys.argv) == 3 and sys.argv[1] == "_gate":
        return gate([int(n) for n in sys.argv[2].split(",")])
    parser = harness.parser(__doc__, database=False)
    parser.add_argument("--tasks", type=int, default=1000, help="queued tasks to drain")
    parser.add_argument("--history", type=int, default=50_000, help="the worker's big history")
    parser.add_argument(
        "--gate-sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[0, 10_000, 100_000],
        help="history sizes for the quota gate, comma-separated",
    )
    parser.add_argument("--rounds", type=int, default=3, help="worker runs per history size")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=harness.postgres_from_environment(),
        help="also run on PostgreSQL (a server URL whose user may create databases)",
    )
    parser.add_argument("--skip-worker", action="store_true")
    parser.add_argument("--skip-gate", action="store_true")
    args = parser.parse_args()
    with harness.run(args, database=False) as bench:
        print(f"{os.cpu_count()} CPUs")
        bench.note_database("sqlite", sqlite3.sqlite_version)
        run_backend(None, args)
        if args.postgres:
            bench.note_database("postgresql", harness.postgres_version(args.postgres))
            run_backend(args.postgres, args)


if __name__ == "__main__":
    main()
