"""Benchmark: the retention pass (archiving unused auto memories) as the history grows.

Prints, from one run on one database, for a history of 0, then HISTORY fresh (recently used)
auto memories of a user with retention on plus HISTORY old ones of a user with retention off:
- a pass with nothing to archive: milliseconds (median) and queries;
- a pass archiving PENDING stale memories: milliseconds (median) and queries;
and the growth from no history to the most (the pass should follow the pending work).

    python benchmarks/bench_retention.py                       # a throwaway SQLite file
    python benchmarks/bench_retention.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created next to the one named and dropped at the end.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE_DIR))

from bench_automemory import setup_database  # noqa: E402

HISTORY = 20_000
PENDING = 50
REPEATS = 9
DAYS = 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="URL of an existing PostgreSQL database to start from")
    args = parser.parse_args()
    url, cleanup = setup_database(args)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    try:
        run()
    finally:
        cleanup()


def run() -> None:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor}")
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
        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from automemory.models import AutoMemorySettings
        from controlplane.models import Project

        users = get_user_model().objects
        self.on = users.create_user("bench-retention-on")
        self.off = users.create_user("bench-retention-off")
        AutoMemorySettings.objects.create(user=self.on, max_unused_days=DAYS)
        self.project = Project.objects.create(name="bench", created_by=self.on)
        self.now = timezone.now()
        self.serial = 0

    def _memories(self, user, count: int, *, age: timedelta, status: str = "active") -> list[int]:
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
                    goal_key=f"g{self.serial}",
                    created_by=user,
                    status=status,
                    archived_at=self.now if status == "archived" else None,
                )
            )
        created = IdentityMemory.objects.bulk_create(memories, batch_size=2000)
        IdentityMemory.objects.filter(pk__in=[m.pk for m in created]).update(
            updated_at=self.now - age
        )
        return [m.pk for m in created]

    def add_history(self, count: int) -> None:
        # Fresh memories of the user with retention on, old ones of a user with it off.
        self._memories(self.on, count, age=timedelta(days=1))
        self._memories(self.off, count, age=timedelta(days=400))

    def measure(self, *, pending: int) -> tuple[float, int]:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from automemory.services.retention import memories_archive_unused
        from controlplane.models import IdentityMemory

        stale = self._memories(self.on, pending, age=timedelta(days=DAYS + 5)) if pending else []
        times, queries = [], 0
        for _ in range(REPEATS):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                summary = memories_archive_unused(now=self.now, batch=500)
                times.append((time.perf_counter() - started) * 1000)
            assert summary.archived == pending, summary
            queries = len(captured.captured_queries)
            IdentityMemory.objects.filter(pk__in=stale).update(status="active", archived_at=None)
        IdentityMemory.objects.filter(pk__in=stale).delete()
        return statistics.median(times), queries


if __name__ == "__main__":
    main()
