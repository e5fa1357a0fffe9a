"""Benchmark: the retention pass (archiving unused auto memories) as the history grows.

Prints, from one run on one database, for a history of 0, then HISTORY fresh (recently used)
auto memories of a user with retention on plus HISTORY old ones of a user with retention off:
- a pass with nothing to archive: milliseconds (median) and queries;
- a pass archiving PENDING stale memories: milliseconds (median) and queries;
and the growth from no history to the most (the pass should follow the pending work).

    .venv/bin/python benchmarks/bench_retention.py                  # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_retention.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
`--save` writes the output to docs/figures/bench_retention.<database>.txt.
"""

import statistics
import time
from datetime import timedelta

import harness

HISTORY = 20_000
PENDING = 50
REPEATS = 9
DAYS = 30


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        run()


def run() -> None:
    fixture = Fixture()
    empty = (fixture.measure(pending=0), fixture.measure(pending=PENDING))
    fixture.add_history(HISTORY)
    loaded = (fixture.measure(pending=0), fixture.measure(pending=PENDING))
    for index, title in enumerate(("pass with nothing to archive", f"pass archiving {PENDING}")):
        (ms_a, q_a), (ms_b, q_b) = empty[index], loaded[index]
        print(f"{title}:")
        print(f"  {'no history':>28}: {ms_a:8.2f} ms, {q_a} queries")
        print(f"  {f'{2 * HISTORY:,} memories of history':>28}: {ms_b:8.2f} ms, {q_b} queries")
        print(f"  ratio: time x{ms_b / ms_a:.2f}, queries x{q_b / max(q_a, 1):.2f}")


class Fixture:
    def __init__(self):
        from django.utils import timezone

        self.on = harness.user_create("bench-retention-on", max_unused_days=DAYS)
        self.off = harness.user_create("bench-retention-off")
        self.project = harness.project_create(self.on)
        self.now = timezone.now()
        self.serial = 0

    def _memories(self, user, count: int, *, age: timedelta, status: str = "active") -> list[int]:
        from automemory.models import MemoryGoal
        from controlplane.models import IdentityMemory, Task

        tasks = Task.objects.bulk_create(
            Task(project=self.project, user=user, prompt="p", status="completed")
            for _ in range(count)
        )
        memories = []
        for task in tasks:
            self.serial += 1
            memories.append(
                IdentityMemory(
                    scope="project",
                    project=self.project,
                    content=f"fact {self.serial}",
                    source="auto",
                    source_task=task,
                    created_by=user,
                    status=status,
                    archived_at=self.now if status == "archived" else None,
                )
            )
        created = IdentityMemory.objects.bulk_create(memories, batch_size=2000)
        MemoryGoal.objects.bulk_create(
            [MemoryGoal.of(m, goal_key=f"g{m.pk}", source_finished_at=None) for m in created],
            batch_size=2000,
        )
        IdentityMemory.objects.filter(pk__in=[m.pk for m in created]).update(
            updated_at=self.now - age
        )
        return [m.pk for m in created]

    def add_history(self, count: int) -> None:
        # Fresh memories of the user with retention on, old ones of a user with it off.
        self._memories(self.on, count, age=timedelta(days=1))
        self._memories(self.off, count, age=timedelta(days=400))

    def measure(self, *, pending: int) -> tuple[float, int]:
        from automemory.services.retention import memories_archive_unused
        from controlplane.models import IdentityMemory

        stale = self._memories(self.on, pending, age=timedelta(days=DAYS + 5)) if pending else []
        times, queries = [], 0
        for _ in range(REPEATS):
            with harness.captured() as capture:
                started = time.perf_counter()
                summary = memories_archive_unused(now=self.now, batch=500)
                times.append((time.perf_counter() - started) * 1000)
            assert summary.archived == pending, summary
            queries = capture.count
            IdentityMemory.objects.filter(pk__in=stale).update(status="active", archived_at=None)
        IdentityMemory.objects.filter(pk__in=stale).delete()
        return statistics.median(times), queries


if __name__ == "__main__":
    main()
