"""Benchmark: model-based extraction's caps, and the sweep's own overhead as history grows.

A fake OpenAI-compatible server (tests/automemory/fake_openai.py, real HTTP on 127.0.0.1)
answers every call at once with a fixed usage. Prints, from one run on one database:
- caps: 100 pending tasks swept with `AUTOMEMORY_MODEL_CALLS_PER_SWEEP` = 20, half of the
  answers needing the repair retry: model calls, ledger rows and tasks left over per sweep
  (never above the cap), and the number of sweeps until none is left;
- budget: tasks pending for a user whose monthly memory budget covers about 7 calls: calls
  made and tasks skipped `memory_budget_exhausted`;
- overhead: a global sweep of 20 pending tasks with an empty history, then with 20,000
  tasks already extracted and 20,000 memory ledger rows of earlier months: milliseconds
  (median) of the whole sweep, of the model calls (measured around the SDK call), and of the
  sweep without them; queries; and the ratios.

    .venv/bin/python benchmarks/bench_model_extraction.py                # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_model_extraction.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
`--save` writes the output to docs/figures/bench_model_extraction.<database>.txt.
"""

import math
import statistics
import time
from datetime import timedelta
from decimal import Decimal

import harness

MODEL = "gpt-5-mini"
CAP = 20
CAP_PENDING = 100
PENDING = 20
HISTORY = 20_000
REPEATS = 7
ANSWER = {
    "worth_remembering": True,
    "kind": "fact",
    "memory": "Run `make test` for the suite; DATABASE_URL switches it to PostgreSQL.",
    "keywords": ["tests"],
    "citations": [],
    "reason": "a command",
}
# 40k prompt tokens at gpt-5-mini's $0.25/M: $0.01 a call.
PROMPT_TOKENS = 40_000


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        from tests.automemory.fake_openai import FakeOpenAI

        server = FakeOpenAI().start()
        try:
            run(server)
        finally:
            server.stop()


class ModelClock:
    """Time spent inside the SDK's Chat Completions call (the model's time, HTTP included)."""

    def __init__(self):
        from openai.resources.chat.completions import Completions

        self.seconds = 0.0
        self.calls = 0
        original = Completions.create
        clock = self

        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                clock.seconds += time.perf_counter() - start
                clock.calls += 1

        Completions.create = timed

    def reset(self) -> None:
        self.seconds = 0.0
        self.calls = 0


def run(server) -> None:
    from django.conf import settings

    from tests.automemory.fake_openai import answer, raw_answer

    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "bench"
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = CAP
    good = answer(ANSWER, prompt_tokens=PROMPT_TOKENS, completion_tokens=0)
    server.respond_with(good)
    clock = ModelClock()
    fixture = Fixture()

    # --- caps ---
    fixture.completed_tasks(fixture.user, CAP_PENDING)
    for _ in range(CAP_PENDING // 2):
        server.enqueue(raw_answer("not json"), good)
    print(f"caps: {CAP_PENDING} pending, {CAP} model calls per sweep, half repaired")
    sweep = 0
    while True:
        sweep += 1
        before = fixture.ledger_rows()
        summary = fixture.sweep()
        rows = fixture.ledger_rows() - before
        print(
            f"  sweep {sweep}: {summary.model_calls} calls, {rows} ledger rows, "
            f"{summary.extracted} extracted, {summary.errors} errors, {summary.deferred} left"
        )
        assert summary.model_calls <= CAP and rows <= CAP, summary
        if not summary.deferred:
            break
    print(f"  all {CAP_PENDING} done in {sweep} sweeps (at least {math.ceil(150 / CAP)})")

    # --- budget ---
    budget = Decimal("0.07")
    other = fixture.new_user("bench-budget", budget=budget)
    fixture.completed_tasks(other, 15)
    summary = fixture.sweep()
    print(
        f"budget: ${budget} a month, $0.01 a call, 15 pending: {summary.model_calls} calls, "
        f"{summary.skipped['memory_budget_exhausted']} skipped memory_budget_exhausted"
    )

    # --- overhead ---
    settings.AUTOMEMORY_MODEL_CALLS_PER_SWEEP = 10_000
    empty = fixture.measure(clock)
    fixture.add_history()
    loaded = fixture.measure(clock)
    print(f"global sweep of {PENDING} pending tasks, each one model call:")
    for label, (total, model, queries) in (
        ("empty history", empty),
        (f"{HISTORY:,} done", loaded),
    ):
        print(
            f"  {label:>16}: {total:8.2f} ms in all, {model:8.2f} ms model, "
            f"{total - model:8.2f} ms sweep, {queries} queries"
        )
    (t_a, m_a, q_a), (t_b, m_b, q_b) = empty, loaded
    ratio = (t_b - m_b) / (t_a - m_a)
    print(f"  ratio without the model: time x{ratio:.2f}, queries x{q_b / q_a:.2f}")


class Fixture:
    def __init__(self):
        self.user = self.new_user("bench-model", budget=Decimal("100000"))
        self.project = harness.project_create(self.user)
        self.serial = 0

    def new_user(self, name, *, budget):
        from controlplane.models import Membership

        user = harness.user_create(
            name, generate_memories=True, extract_model=MODEL, monthly_memory_budget_usd=budget
        )
        if hasattr(self, "project"):
            Membership.objects.create(project=self.project, user=user, role="member")
        return user

    def completed_tasks(self, user, count):
        tasks = harness.tasks_completed(self.project, user, count, start=self.serial + 1)
        self.serial += count
        return tasks

    def ledger_rows(self) -> int:
        from controlplane.models import UsageRecord

        return UsageRecord.objects.count()

    def sweep(self):
        return harness.sweep()

    def measure(self, clock):
        self.sweep()  # settle anything left from set-up
        self.completed_tasks(self.user, PENDING)
        self.sweep()  # warm up (connections, compiled patterns, the client)
        totals, models, queries = [], [], []
        for _ in range(REPEATS):
            self.completed_tasks(self.user, PENDING)
            clock.reset()
            with harness.captured() as capture:
                start = time.perf_counter()
                summary = self.sweep()
                totals.append((time.perf_counter() - start) * 1000)
            assert summary.extracted == PENDING and clock.calls == PENDING, summary
            models.append(clock.seconds * 1000)
            queries.append(capture.count)
        return statistics.median(totals), statistics.median(models), statistics.median(queries)

    def add_history(self):
        """Tasks extracted in earlier rounds, and the model calls of earlier months."""
        from django.db import connection
        from django.utils import timezone

        from automemory.models import AutoMemoryLog, MemoryGoal, SweepState
        from automemory.services.text import goal_key
        from controlplane.models import IdentityMemory, UsageRecord

        now = timezone.now()
        extracted = self.completed_tasks(self.user, HISTORY)
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
        AutoMemoryLog.objects.bulk_create(
            [
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
            ],
            batch_size=2000,
        )
        UsageRecord.objects.bulk_create(
            [
                UsageRecord(
                    user=self.user,
                    task=t,
                    project=self.project,
                    kind="memory_extraction",
                    model=MODEL,
                    input_tokens=PROMPT_TOKENS,
                    cost_usd=Decimal("0.01"),
                    finished_at=now - timedelta(days=40 + index % 300),
                )
                for index, t in enumerate(extracted)
            ],
            batch_size=2000,
        )
        last = extracted[-1]
        last.refresh_from_db()
        SweepState.objects.filter(name="global").update(
            cursor_updated_at=last.updated_at, cursor_task_id=last.pk
        )
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")


if __name__ == "__main__":
    main()
