"""Benchmark: consolidation's model calls and ledger rows per sweep, and its own overhead.

The consolidation model is the tests' fake OpenAI-compatible server on 127.0.0.1
(tests/automemory/fake_openai.py), answering `add` at once. Prints, from one run on one
database:
- a sweep over 40 pending tasks with a cap of 15 model calls per sweep: the calls made,
  the ledger rows written and the tasks left for the next sweep, sweep after sweep until
  none is left (calls and rows never pass the cap);
- the sweep's own time per task, model call time excluded (measured around each call),
  and its queries per task, with 0, 2,000 and 20,000 active memories in the project, one in
  20 of them about the same subject as the new ones (--all-matching: all of them). The
  candidate search ranks every memory that matches a word of the new memory, so that is
  the part that grows with them.

    .venv/bin/python benchmarks/bench_consolidation.py                 # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_consolidation.py --all-matching  # the search's worst case
    .venv/bin/python benchmarks/bench_consolidation.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
with --database URL the benchmark runs in that (empty) database and leaves its rows there;
`--save` writes the output to docs/figures/bench_consolidation.<database>.txt.
"""

import statistics
import time
from datetime import timedelta

import harness

PENDING = 40
CAP = 15
HISTORIES = (0, 2_000, 20_000)
MEASURED_TASKS = 20
REPEATS = 3
# One history memory in this many shares the words of the pending tasks' memories.
MATCHING_SHARE = 20
MODEL = "bench-consolidator"


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument(
        "--all-matching",
        action="store_true",
        help="every history memory shares the new memories' words (the search's worst case)",
    )
    args = parser.parse_args()
    with harness.run(args):
        from tests.automemory.fake_openai import FakeOpenAI, answer

        server = FakeOpenAI().start()
        server.respond_with(
            answer(
                {"action": "add", "memory_id": None, "memory_ids": [], "text": "", "reason": "new"}
            )
        )
        try:
            run(server, all_matching=args.all_matching)
        finally:
            server.stop()


class ModelClock:
    """Time spent inside consolidation's model calls (the fake server's answers)."""

    def __init__(self):
        from automemory.services.extraction import consolidation

        self.module = consolidation
        self.original = consolidation.model_json_call
        self.seconds = 0.0
        self.calls = 0

        def timed(**kwargs):
            start = time.perf_counter()
            try:
                return self.original(**kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        consolidation.model_json_call = timed

    def reset(self):
        self.seconds, self.calls = 0.0, 0


def run(server, *, all_matching: bool) -> None:
    from django.conf import settings

    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "bench"
    settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = CAP
    fixture = Fixture(all_matching=all_matching)
    clock = ModelClock()
    fixture.seed()
    bench_caps(fixture)
    settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = 10_000
    share = "all" if all_matching else f"1 in {MATCHING_SHARE}"
    print(
        f"sweep overhead per task, model time excluded ({MEASURED_TASKS} tasks per sweep; "
        f"{share} of the history's memories share the new memories' words):"
    )
    for history in HISTORIES:
        fixture.grow_memories(history)
        ms, queries, calls = fixture.measure(clock)
        print(
            f"  {history:>6,} active memories: {ms:7.2f} ms/task, {queries:5.1f} queries/task, "
            f"{calls} model calls"
        )


def bench_caps(fixture) -> None:
    from controlplane.models import UsageKind, UsageRecord

    fixture.completed_tasks(PENDING)
    print(f"{PENDING} pending tasks, cap {CAP} model calls per sweep:")
    for round_number in range(1, 10):
        before = UsageRecord.objects.filter(kind=UsageKind.MEMORY_CONSOLIDATION).count()
        summary = harness.sweep()
        rows = UsageRecord.objects.filter(kind=UsageKind.MEMORY_CONSOLIDATION).count() - before
        print(
            f"  sweep {round_number}: {summary.model_calls} calls, {rows} ledger rows, "
            f"{summary.extracted} extracted, {summary.deferred} left for the next sweep"
        )
        assert summary.model_calls <= CAP and rows <= CAP, summary
        if not summary.deferred:
            break


class Fixture:
    def __init__(self, *, all_matching: bool = False):
        self.user = harness.user_create(
            "bench-consolidation",
            generate_memories=True,
            consolidation_model=MODEL,
            monthly_memory_budget_usd=100_000,
        )
        self.project = harness.project_create(self.user)
        self.serial = 0
        self.memories = 0
        self.all_matching = all_matching

    def completed_tasks(self, count, *, finished_ago=timedelta(hours=2)):
        tasks = harness.tasks_completed(
            self.project,
            self.user,
            count,
            prompt="Deploy step {i}",
            result_text="The deploy script needs the staging flag, case {i}. " * 8,
            finished_ago=finished_ago,
            start=self.serial + 1,
        )
        self.serial += count
        return tasks

    def seed(self):
        """A few memories, so that every pending task has candidates and is asked about."""
        self.completed_tasks(3)
        harness.sweep()

    def history_text(self, number: int) -> str:
        """One memory in `MATCHING_SHARE` shares the pending tasks' words (all with
        --all-matching); the others are about other subjects."""
        if self.all_matching or number % MATCHING_SHARE == 0:
            return f"Deploy note {number}: the staging flag and the deploy script."
        topic = number % MATCHING_SHARE
        return f"Note {number} on subject{topic}: widget{topic} gadget{topic} module{topic}."

    def grow_memories(self, total: int):
        """Active auto memories of the project up to `total`, each from its own old task."""
        from django.db import transaction
        from django.utils import timezone

        from automemory.models import AutoMemoryLog, MemoryGoal, MemorySourceTask
        from automemory.services.text import goal_key
        from controlplane.models import IdentityMemory, Task

        missing = total - self.memories
        if missing <= 0:
            return
        with transaction.atomic():
            tasks = self.completed_tasks(missing, finished_ago=timedelta(days=30))
            memories = IdentityMemory.objects.bulk_create(
                [
                    IdentityMemory(
                        scope="project",
                        project=self.project,
                        content=self.history_text(task.pk),
                        source="auto",
                        source_task=task,
                    )
                    for task in tasks
                ],
                batch_size=2000,
            )
            MemoryGoal.objects.bulk_create(
                [
                    MemoryGoal.of(m, goal_key=goal_key(task), source_finished_at=task.finished_at)
                    for m, task in zip(memories, tasks, strict=True)
                ],
                batch_size=2000,
            )
            MemorySourceTask.objects.bulk_create(
                [MemorySourceTask(memory=m, task_id=m.source_task_id) for m in memories],
                batch_size=2000,
            )
            now = timezone.now()
            # Behind the sweep's cursor, as history is.
            Task.objects.filter(pk__in=[t.pk for t in tasks]).update(
                updated_at=now - timedelta(days=30)
            )
            AutoMemoryLog.objects.bulk_create(
                [
                    AutoMemoryLog(
                        task=task,
                        user=self.user,
                        outcome="extracted",
                        reason="new",
                        memory=memory,
                        first_attempt_at=now,
                        last_attempt_at=now,
                    )
                    for task, memory in zip(tasks, memories, strict=True)
                ],
                batch_size=2000,
            )
        self.memories = total

    def measure(self, clock):
        per_task_ms, per_task_queries, calls = [], [], 0
        for _ in range(REPEATS):
            self.completed_tasks(MEASURED_TASKS)
            clock.reset()
            with harness.captured() as capture:
                start = time.perf_counter()
                summary = harness.sweep()
                elapsed = time.perf_counter() - start
            assert summary.extracted == MEASURED_TASKS, summary.as_dict()
            calls = clock.calls
            per_task_ms.append((elapsed - clock.seconds) * 1000 / MEASURED_TASKS)
            per_task_queries.append(capture.count / MEASURED_TASKS)
        return statistics.median(per_task_ms), statistics.median(per_task_queries), calls


if __name__ == "__main__":
    main()
