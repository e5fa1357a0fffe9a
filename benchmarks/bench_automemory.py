"""Benchmark: the auto memory sweep and injection, with and without a large history.

Prints, from one run on one database:
- the global sweep over 50 pending tasks with an empty history, then with 50,000 tasks
  already extracted or switched off: milliseconds (median) and queries, and their ratios;
- the injection of memories into a first turn with 10 memories stored, then 20,000:
  milliseconds (median) and queries, and their ratios;
- the per-user sweep (the run endpoint, `manage.py run_auto_memory`) of a user with 0, 10,000
  and 100,000 completed tasks of history, with nothing pending and with 5 new tasks pending:
  milliseconds (median) and queries, and the growth from no history to the most.

    .venv/bin/python benchmarks/bench_automemory.py                    # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_automemory.py --postgres postgres://postgres@127.0.0.1:5432/postgres
    .venv/bin/python benchmarks/bench_automemory.py --user-sweep-only  # just the per-user sweep

`bench_user_sweep()` prints the per-user figures on an already migrated database; other
benchmark scripts call it too. With --postgres a throwaway database is created on the server
named and dropped at the end; `--save` writes the output to
docs/figures/bench_automemory.<database>.txt.
"""

import os
import statistics
import time
from datetime import timedelta

import harness

HISTORY = 50_000
PENDING = 50
MEMORIES = 20_000
REPEATS = 7
USER_SWEEP_HISTORY = (0, 10_000, 100_000)
USER_SWEEP_PENDING = 5
USER_SWEEP_REPEATS = 21


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument(
        "--user-sweep-only", action="store_true", help="measure only the per-user sweep"
    )
    args = parser.parse_args()
    with harness.run(args):
        run(user_sweep_only=args.user_sweep_only)


def run(*, user_sweep_only: bool = False) -> None:
    if not user_sweep_only:
        run_global_and_injection()
    bench_user_sweep()


def run_global_and_injection() -> None:
    fixture = Fixture()
    empty = fixture.measure_sweep()
    empty_quota = fixture.measure_quota()
    fixture.add_history()
    loaded = fixture.measure_sweep()
    loaded_quota = fixture.measure_quota()
    report("sweep of 50 pending tasks", "empty history", empty, f"{HISTORY:,} done", loaded)
    report(
        "  of which the quota gate (the user's spend this month)",
        "empty history",
        empty_quota,
        f"{HISTORY:,} done",
        loaded_quota,
    )

    few = fixture.measure_injection()
    fixture.add_memories()
    many = fixture.measure_injection()
    report("injection into a first turn", "10 memories", few, f"{MEMORIES:,} memories", many)


def report(title, label_a, a, label_b, b) -> None:
    (ms_a, q_a), (ms_b, q_b) = a, b
    print(f"{title}:")
    print(f"  {label_a:>16}: {ms_a:8.2f} ms, {q_a} queries")
    print(f"  {label_b:>16}: {ms_b:8.2f} ms, {q_b} queries")
    print(f"  ratio: time x{ms_b / ms_a:.2f}, queries x{q_b / q_a:.2f}")


class Fixture:
    def __init__(self):
        self.on = harness.user_create("bench-on", generate_memories=True, use_memories=True)
        self.off = harness.user_create("bench-off")
        self.project = harness.project_create(self.on, members=[self.off])
        self.serial = 0

    def completed_tasks(self, user, count, *, prompt=None):
        tasks = harness.tasks_completed(
            self.project, user, count, prompt=prompt or "Goal {i}", start=self.serial + 1
        )
        self.serial += count
        return tasks

    def measure_sweep(self):
        harness.sweep()  # settle anything left from set-up
        timings, queries = [], []
        for _ in range(REPEATS):
            self.completed_tasks(self.on, PENDING)
            with harness.captured() as capture:
                start = time.perf_counter()
                summary = harness.sweep()
                timings.append((time.perf_counter() - start) * 1000)
            assert summary.extracted == PENDING, summary
            queries.append(capture.count)
        return statistics.median(timings), statistics.median(queries)

    def measure_quota(self):
        from controlplane.services.quota import quota_statuses_get

        def call():
            return quota_statuses_get(user_ids=[self.on.pk])

        queries = harness.statements_of(call)
        return harness.timed(call, repeats=REPEATS, warmup=0).median_ms, queries

    def add_history(self):
        """50,000 tasks as earlier rounds leave them: half extracted, half switched off."""
        from django.db import connection
        from django.utils import timezone

        from automemory.models import AutoMemoryLog, MemoryGoal, SweepState
        from automemory.services.text import goal_key
        from controlplane.models import IdentityMemory

        now = timezone.now()
        half = HISTORY // 2
        extracted = self.completed_tasks(self.on, half)
        memories = IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(
                    scope="project",
                    project=self.project,
                    content=t.prompt,
                    source="auto",
                    source_task=t,
                )
                for t in extracted
            ],
            batch_size=2000,
        )
        MemoryGoal.objects.bulk_create(
            [
                MemoryGoal.of(m, goal_key=goal_key(t), source_finished_at=t.finished_at)
                for m, t in zip(memories, extracted, strict=True)
            ],
            batch_size=2000,
        )
        switched_off = self.completed_tasks(self.off, half)
        logs = [
            AutoMemoryLog(
                task=t,
                user_id=t.user_id,
                outcome="extracted",
                reason="new",
                memory=m,
                first_attempt_at=now,
                last_attempt_at=now,
            )
            for t, m in zip(extracted, memories, strict=True)
        ] + [
            AutoMemoryLog(
                task=t,
                user_id=t.user_id,
                outcome="skipped",
                reason="generate_disabled",
                first_attempt_at=now,
                last_attempt_at=now,
            )
            for t in switched_off
        ]
        AutoMemoryLog.objects.bulk_create(logs, batch_size=2000)
        last = switched_off[-1]
        last.refresh_from_db()
        SweepState.objects.filter(name="global").update(
            cursor_updated_at=last.updated_at, cursor_task_id=last.pk
        )
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")

    def measure_injection(self):
        from automemory.services.injector import inject_memories
        from controlplane.models import IdentityMemory, Task

        if not IdentityMemory.objects.filter(scope="user").exists():
            for i in range(5):
                IdentityMemory.objects.create(scope="user", user=self.on, content=f"pref {i}")
        task = Task.objects.create(project=self.project, user=self.on, prompt="New work")
        timings, queries = [], []
        for _ in range(REPEATS):
            with harness.captured() as capture:
                start = time.perf_counter()
                result = inject_memories(task=task, prompt=task.prompt, goal=None)
                timings.append((time.perf_counter() - start) * 1000)
            assert len(result.memory_ids) == 10, result
            queries.append(capture.count)
        return statistics.median(timings), statistics.median(queries)

    def add_memories(self):
        from controlplane.models import IdentityMemory

        IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(scope="project", project=self.project, content=f"fact {i}")
                for i in range(MEMORIES)
            ]
            + [
                IdentityMemory(scope="user", user=self.on, content=f"pref {i}")
                for i in range(MEMORIES // 10)
            ],
            batch_size=2000,
        )


def bench_user_sweep(
    *,
    sizes=USER_SWEEP_HISTORY,
    pending=USER_SWEEP_PENDING,
    repeats=USER_SWEEP_REPEATS,
    prefix="bench-us",
) -> None:
    """Print the per-user sweep's time and queries as the user's history grows.

    History is what earlier rounds leave: completed tasks two hours old, half extracted (a
    memory and an `extracted` log row each), half stable skips (`result_too_short`), with
    the worker's global sweep run after each load until its cursor has passed it. Besides the
    median, the best run and the time spent inside the database are shown: on a shared
    machine the median moves with the load, the other two much less.
    """
    fixture = UserSweepFixture(prefix)
    rows = []
    for size in sizes:
        fixture.grow_history_to(size)
        idle = fixture.measure(pending=0, repeats=repeats)
        busy = fixture.measure(pending=pending, repeats=repeats)
        rows.append((size, idle, busy))
    print(
        f"per-user sweep (run endpoint, run_auto_memory), {repeats} runs; "
        "ms median / best / in the database (median), queries:"
    )
    print(f"  {'history':>16}  {'nothing pending':>33}  {f'{pending} pending':>33}")
    for size, idle, busy in rows:
        print(f"  {f'{size:,} done':>16}: {_figures(idle)}  {_figures(busy)}")
    last = rows[-1][0]
    for label, column in (("nothing pending", 1), (f"{pending} pending", 2)):
        (med_a, best_a, db_a, q_a), (med_b, best_b, db_b, q_b) = rows[0][column], rows[-1][column]
        print(
            f"  growth 0 -> {last:,} done, {label}: median x{med_b / med_a:.2f}, "
            f"best x{best_b / best_a:.2f}, database x{db_b / db_a:.2f}, "
            f"queries x{q_b / q_a:.2f}"
        )


def _figures(figures) -> str:
    median, best, db_ms, queries = figures
    return f"{median:7.2f} / {best:7.2f} / {db_ms:6.2f} ms, {queries:3} q"


class UserSweepFixture:
    def __init__(self, prefix):
        self.user = harness.user_create(f"{prefix}-{os.getpid()}", generate_memories=True)
        self.project = harness.project_create(self.user, f"{prefix} project")
        self.history = 0
        self.serial = 0

    def tasks(self, count, *, result_text=None, age=timedelta(hours=2), old=True):
        from controlplane.models import Task

        created = harness.tasks_completed(
            self.project,
            self.user,
            count,
            prompt="Per-user goal {i}",
            result_text=result_text,
            finished_ago=age,
            start=self.serial + 1,
        )
        self.serial += count
        if not old:
            return created
        # Old history: last changed when it finished (bulk_create stamps `updated_at` now).
        finished = created[0].finished_at if created else None
        ids = [task.pk for task in created]
        for start in range(0, len(ids), 5000):
            Task.objects.filter(pk__in=ids[start : start + 5000]).update(updated_at=finished)
        return created

    def grow_history_to(self, size):
        from django.db import connection
        from django.utils import timezone

        from automemory.models import AutoMemoryLog, MemoryGoal
        from automemory.services.text import goal_key
        from controlplane.models import IdentityMemory, Task

        add = size - self.history
        if add <= 0:
            return
        now = timezone.now()
        # The tasks the last measurement completed are history now: last changed a while ago.
        Task.objects.filter(user=self.user, updated_at__gt=now - timedelta(hours=1)).update(
            updated_at=now - timedelta(hours=1)
        )
        extracted = self.tasks(add // 2)
        memories = IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(
                    scope="project",
                    project=self.project,
                    content=task.prompt,
                    source="auto",
                    source_task=task,
                )
                for task in extracted
            ],
            batch_size=2000,
        )
        MemoryGoal.objects.bulk_create(
            [
                MemoryGoal.of(m, goal_key=goal_key(task), source_finished_at=task.finished_at)
                for m, task in zip(memories, extracted, strict=True)
            ],
            batch_size=2000,
        )
        skipped = self.tasks(add - add // 2, result_text="short")
        logs = [
            AutoMemoryLog(
                task=task,
                user=self.user,
                outcome="extracted",
                reason="new",
                memory=memory,
                first_attempt_at=now,
                last_attempt_at=now,
            )
            for task, memory in zip(extracted, memories, strict=True)
        ] + [
            AutoMemoryLog(
                task=task,
                user=self.user,
                outcome="skipped",
                reason="result_too_short",
                first_attempt_at=now,
                last_attempt_at=now,
            )
            for task in skipped
        ]
        AutoMemoryLog.objects.bulk_create(logs, batch_size=2000)
        self.history = size
        if connection.vendor == "postgresql":
            # As autovacuum would: drop the index entries the back-dating UPDATE left behind.
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE")
        self.settle()

    def settle(self):
        """The worker's sweeps, until the global cursor has passed the history: a
        deployment's sweeper does one every few seconds, so history that arrives in a burst
        this size is passed over within a few hundred of them."""
        from django.db.models import Max

        from automemory.models import SweepState
        from controlplane.models import Task

        newest = Task.objects.filter(user=self.user).aggregate(Max("updated_at"))["updated_at__max"]
        for _ in range(1000):
            harness.sweep()
            state = SweepState.objects.filter(name="global").first()
            if state is None or state.cursor_updated_at is None or newest is None:
                continue
            if state.cursor_updated_at > newest:
                return

    def measure(self, *, pending, repeats):
        harness.sweep(user=self.user)  # settle anything left from set-up
        timings, db_timings, queries = [], [], []
        for _ in range(repeats):
            if pending:
                # Completed just now (`updated_at`), idle long enough (`finished_at`).
                self.tasks(pending, old=False)
            with harness.captured() as capture:
                start = time.perf_counter()
                summary = harness.sweep(user=self.user)
                timings.append((time.perf_counter() - start) * 1000)
            assert summary.extracted == pending and summary.scanned == pending, summary.as_dict()
            queries.append(capture.count)
            db_timings.append(capture.database_ms)
        return (
            statistics.median(timings),
            min(timings),
            statistics.median(db_timings),
            statistics.median(queries),
        )


if __name__ == "__main__":
    main()
