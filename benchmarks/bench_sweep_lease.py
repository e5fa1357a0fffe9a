"""Benchmark: what one sweeper at a time costs, in statements per sweeper turn.

Every worker's sweeper thread tries the global sweep lease once per
AUTOMEMORY_SWEEP_INTERVAL_SECONDS. Prints, on one database:
- a worker that does not hold the lease (another does): statements per try;
- the holder with nothing pending: statements per sweep (lease, cursor, both reads);
- the holder with PENDING completed tasks to extract (deterministic text, one user): statements
  per sweep, and per task;
- the same sweep again with 20,000 tasks of settled history: its statements and time ratio,
  so the lease adds nothing that grows with history;
and, for N workers at one try per interval, the lease's statements per second in all.

    .venv/bin/python benchmarks/bench_sweep_lease.py                  # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_sweep_lease.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
`--save` writes the output to docs/figures/bench_sweep_lease.<database>.txt.
"""

import statistics
import time

import harness

PENDING = 20
HISTORY = 20_000
REPEATS = 5
WORKERS = (4, 50)


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        run()


def run() -> None:
    from automemory import conf
    from automemory.services.extraction.lease import GLOBAL, Lease, lease_take, leases_release
    from automemory.services.extraction.sweep import GlobalSweeper

    user = harness.user_create(
        "bench-lease",
        generate_memories=True,
        idle_seconds=0,
        min_duration_seconds=0,
        min_result_chars=0,
    )
    project = harness.project_create(user)
    holder, other = GlobalSweeper(holder="bench holder"), GlobalSweeper(holder="bench other")

    holder.sweep()
    refused = harness.statements_of(other.sweep)
    idle = harness.statements_of(holder.sweep)
    print(f"a worker that does not hold the lease: {refused} statement(s) per try")
    print(f"the holder with nothing pending: {idle} statements per sweep")

    def pending_sweep() -> tuple[int, float]:
        harness.tasks_completed(project, user, PENDING, prompt="Goal {i}")
        with harness.captured() as capture:
            started = time.perf_counter()
            summary = holder.sweep()
            elapsed = time.perf_counter() - started
        assert summary is not None and summary.extracted == PENDING, summary
        return capture.count, elapsed * 1000

    fresh = [pending_sweep() for _ in range(REPEATS)]
    statements = fresh[-1][0]
    print(
        f"the holder extracting {PENDING} tasks: {statements} statements per sweep, "
        f"{statements / PENDING:.1f} per task, {statistics.median(t for _, t in fresh):.1f} ms"
    )
    history = harness.tasks_completed(project, user, HISTORY, prompt="Old goal {i}")
    settle_history(history)
    loaded = [pending_sweep() for _ in range(REPEATS)]
    ratio = statistics.median(t for _, t in loaded) / statistics.median(t for _, t in fresh)
    print(
        f"the same with {HISTORY:,} tasks of history: {loaded[-1][0]} statements per sweep, "
        f"time x{ratio:.2f}"
    )
    interval = conf.get("SWEEP_INTERVAL_SECONDS")
    for workers in WORKERS:
        per_second = ((workers - 1) * refused + idle) / interval
        print(
            f"{workers} workers, one try each per {interval}s: "
            f"{per_second:.1f} lease statements per second in all (idle)"
        )
    leases_release(holder.lease)
    assert lease_take(Lease(holder="check"), GLOBAL)


def settle_history(tasks) -> None:
    """Earlier sweeps dealt with these tasks, an hour ago: the global cursor is past them."""
    from datetime import timedelta

    from django.db.models import Max
    from django.utils import timezone

    from automemory.models import SweepState
    from controlplane.models import Task

    an_hour_ago = timezone.now() - timedelta(hours=1)
    Task.objects.filter(pk__in=[task.pk for task in tasks]).update(updated_at=an_hour_ago)
    last = Task.objects.filter(updated_at=an_hour_ago).aggregate(id=Max("id"))
    SweepState.objects.filter(name="global").update(
        cursor_updated_at=an_hour_ago, cursor_task_id=last["id"]
    )


if __name__ == "__main__":
    main()
