"""Benchmark: the memory tools and feedback, and what they cost.

Prints, from one run on one database:
- `memory_search` (the memory tool, through its task key, as the MCP server calls it) and the
  preview (`GET /projects/{id}/memory-preview`'s service), with 100 and 20,000 memories in
  the project: time (median / best of repeated runs) and queries (data statements +
  transaction control), and the ratio of the time at 20,000 to 100. The queries must not
  grow with the memories; the time should stay within 2x;
- the worker's cost of reading citations from a 1 MB result (`citations_parse`, only the
  result's end is read) and of recording them (`citations_record`, with the database);
- recall@5 of `relevant` with feedback on vs off (`AUTOMEMORY_RANKING_FEEDBACK`), on the
  retrieval benchmark's data (benchmarks/bench_retrieval.py: 240 memories over 24 topics, 100
  new tasks), after 200 earlier tasks cited the injected memories of their own topic (as an
  agent that cites what it used would) and nothing else.

    .venv/bin/python benchmarks/bench_feedback.py                  # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_feedback.py --postgres postgres://postgres@127.0.0.1:5432/postgres

`--save` writes the output to docs/figures/bench_feedback.<database>.txt.
"""

import random
import re
import statistics
import time
from datetime import timedelta

import bench_retrieval as retrieval
import harness

SIZES = (100, 20_000)
REPEATS = 21
TRAINING_TASKS = 200
SEED = 23
TRANSACTION_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        from django.conf import settings

        # Measure the calls, not the throttle (its counters live in the cache).
        rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
        rates["memory_tool"] = rates["user"] = ""
        bench_search_and_preview()
        bench_health()
        bench_citations()
        bench_recall_with_feedback()


class Scene:
    """A user with `relevant` ranking, a project of `size` memories, and a running task
    holding a memory tool key."""

    def __init__(self, name: str, size: int, rng: random.Random):
        from django.utils import timezone

        from automemory.services.task_keys import task_key_new, task_state_store
        from controlplane.models import IdentityMemory, Task

        self.user = harness.user_create(
            name, use_memories=True, generate_memories=False, injection_ranking="relevant"
        )
        self.project = harness.project_create(self.user, name)
        topics = list(retrieval.TOPICS)
        IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(
                    scope="project",
                    project=self.project,
                    content=retrieval.memory_text(rng, topics[i % len(topics)], i),
                )
                for i in range(size)
            ],
            batch_size=2000,
        )
        retrieval.vectors_fill(self.project.pk)
        minted = task_key_new()
        self.key = minted.key
        self.task = Task.objects.create(
            project=self.project,
            user=self.user,
            prompt="benchmark",
            status="running",
            claimed_at=timezone.now(),
        )
        task_state_store(
            task_id=self.task.pk, key_hash=minted.key_hash, claimed_at=self.task.claimed_at
        )


def _measure(call, prompts: list[str]) -> tuple[float, float, int, int]:
    timings, data, control = [], [], []
    for prompt in prompts:
        with harness.captured() as capture:
            started = time.perf_counter()
            call(prompt)
            timings.append((time.perf_counter() - started) * 1000)
        control_count = sum(bool(TRANSACTION_CONTROL.match(sql)) for sql in capture.statements)
        data.append(capture.count - control_count)
        control.append(control_count)
    return statistics.median(timings), min(timings), max(data), max(control)


def bench_search_and_preview() -> None:
    from django.db import connection

    from automemory.services import embeddings
    from automemory.services.injector import memory_preview
    from automemory.services.memory_tools import tool_search

    rng = random.Random(SEED)
    topics = list(retrieval.TOPICS)
    prompts = [retrieval.task_text(rng, topics[n % len(topics)], n) for n in range(REPEATS)]
    print(
        f"memory_search (limit 10) and the preview over {REPEATS} prompts: ms median / best; "
        "queries: data statements + transaction control (most in one call)"
    )
    results: dict[str, dict[int, tuple]] = {
        "memory_search": {},
        "preview": {},
        "memory_search, read": {},
        "preview, read": {},
    }
    for size in SIZES:
        scene = Scene(f"tools-{size}", size, rng)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")

        def search(prompt, scene=scene):
            tool_search(key=scene.key, query=prompt, limit=10)

        def preview(prompt, scene=scene):
            plan = memory_preview(
                user=scene.user, project_id=scene.project.pk, prompt=prompt, goal=None
            )
            assert plan.memory_ids, plan

        for name, call in (("memory_search", search), ("preview", preview)):
            call(prompts[0])  # warm the statement and page caches
            embeddings.reset()  # each text's vector is computed anew in the first pass
            call("Load the embedding model")
            results[name][size] = _measure(call, prompts)
            # Again: the texts' vectors are kept (per process), so this is the read alone.
            results[f"{name}, read"][size] = _measure(call, prompts)
    for name, by_size in results.items():
        for size, (median, best, data, control) in by_size.items():
            print(
                f"  {name:>19} {size:>7,} memories: {median:7.2f} / {best:7.2f} ms, "
                f"{data} + {control} queries"
            )
        few, many = by_size[SIZES[0]], by_size[SIZES[-1]]
        print(
            f"  {name:>19} time at {SIZES[-1]:,} / at {SIZES[0]:,}: median x{many[0] / few[0]:.2f},"
            f" best x{many[1] / few[1]:.2f}; queries {few[2]} -> {many[2]}"
        )


HEALTH_TASKS = (100, 10_000)


def bench_health() -> None:
    from django.db import connection
    from django.utils import timezone

    from automemory.models import MemoryState, TaskMemoryState
    from automemory.selectors import memory_health_get
    from automemory.services.injector import injections_count
    from controlplane.models import IdentityMemory, Task

    print(f"memory health (memory_health_get), {REPEATS} runs: ms median / best; queries")
    rows = {}
    for count in HEALTH_TASKS:
        user = harness.user_create(f"health-{count}")
        project = harness.project_create(user, f"health-{count}")
        now = timezone.now()
        memories = IdentityMemory.objects.bulk_create(
            IdentityMemory(scope="project", project=project, content=f"Fact {i}")
            for i in range(100)
        )
        ids = [m.pk for m in memories]
        MemoryState.objects.bulk_create(
            MemoryState(memory_id=pk, last_injected_at=now) for pk in ids
        )
        tasks = Task.objects.bulk_create(
            (
                Task(
                    project=project,
                    user=user,
                    prompt="p",
                    status="completed",
                    started_at=now - timedelta(minutes=i % (8 * 7 * 24 * 60)),
                )
                for i in range(count)
            ),
            batch_size=2000,
        )
        TaskMemoryState.objects.bulk_create(
            (
                TaskMemoryState(task=task, injected_memory_ids=ids[i % 95 : i % 95 + 5])
                for i, task in enumerate(tasks)
            ),
            batch_size=2000,
        )
        for i, task in enumerate(tasks):  # as each injection counts it
            injections_count(memory_ids=ids[i % 95 : i % 95 + 5], now=task.started_at)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        timing = harness.timed(
            lambda project=project, user=user: memory_health_get(project=project, user=user),
            repeats=REPEATS,
        )
        with harness.captured() as capture:
            health = memory_health_get(project=project, user=user)
        assert health.injected == 5 * count, health.injected
        rows[count] = (timing.median_ms, timing.best_ms, capture.count)
        print(
            f"  {count:>7,} tasks: {timing.median_ms:7.2f} / {timing.best_ms:7.2f} ms, "
            f"{capture.count} queries"
        )
    few, many = rows[HEALTH_TASKS[0]], rows[HEALTH_TASKS[-1]]
    print(
        f"  time at {HEALTH_TASKS[-1]:,} tasks / at {HEALTH_TASKS[0]:,}: median "
        f"x{many[0] / few[0]:.2f}, best x{many[1] / few[1]:.2f}"
    )


def bench_citations() -> None:
    from automemory.models import TaskMemoryState
    from automemory.services.feedback import citations_parse, citations_record
    from controlplane.models import IdentityMemory, Task

    user = harness.user_create("citations", use_memories=True)
    project = harness.project_create(user, "citations")
    memories = [
        IdentityMemory.objects.create(scope="project", project=project, content=f"fact {i}")
        for i in range(5)
    ]
    line = "Memories used: " + ", ".join(f"#{m.pk}" for m in memories)
    body = ("The change touches auth.py and the session middleware. " * 20_000)[:1_000_000]
    with_line, without_line = body + "\n" + line, body
    print(f"citations in a {len(with_line) / 1e6:.1f} MB result: ms median / best of {REPEATS}")
    parsed = harness.timed(lambda: citations_parse(with_line), repeats=REPEATS)
    none = harness.timed(lambda: citations_parse(without_line), repeats=REPEATS)
    print(
        f"  citations_parse, a `Memories used:` line: {parsed.median_ms:.3f} / {parsed.best_ms:.3f}"
    )
    print(f"  citations_parse, no such line:           {none.median_ms:.3f} / {none.best_ms:.3f}")
    times = []
    for _ in range(REPEATS):
        task = Task.objects.create(
            project=project,
            user=user,
            prompt="p",
            status="completed",
        )
        TaskMemoryState.objects.create(task=task, injected_memory_ids=[m.pk for m in memories])
        started = time.perf_counter()
        outcome = citations_record(task=task, result_text=with_line)
        times.append((time.perf_counter() - started) * 1000)
        assert len(outcome.counted) == 5, outcome
    print(
        f"  citations_record (parse + 5 cites counted): {statistics.median(times):.3f} / "
        f"{min(times):.3f}"
    )


def bench_recall_with_feedback() -> None:
    from django.conf import settings
    from django.utils import timezone
    from freezegun import freeze_time

    from automemory.models import FeedbackVia, memory_usage
    from automemory.services.feedback import memory_cite
    from automemory.services.injector import inject_memories
    from controlplane.models import IdentityMemory, Task

    rng = random.Random(retrieval.SEED)
    scene = retrieval.Scene("feedback-recall")
    scene.rank_by("relevant")
    rows = [(topic, i) for topic in retrieval.TOPICS for i in range(retrieval.MEMORIES_PER_TOPIC)]
    rng.shuffle(rows)
    topic_of: dict[int, str] = {}
    start = timezone.now() - timedelta(days=120)
    for position, (topic, i) in enumerate(rows):
        with freeze_time(start + timedelta(hours=12 * position)):
            created = IdentityMemory.objects.create(
                scope="project", project=scene.project, content=retrieval.memory_text(rng, topic, i)
            )
        topic_of[created.pk] = topic
    topics = list(retrieval.TOPICS)
    tests = [
        (topics[n % len(topics)], retrieval.task_text(rng, topics[n % len(topics)], n))
        for n in range(retrieval.TASKS)
    ]
    # Earlier tasks, worded apart from the measured ones: each cites the injected memories
    # of its own topic.
    history = random.Random(SEED + 1)
    cited = 0
    for n in range(TRAINING_TASKS):
        topic = topics[history.randrange(len(topics))]
        prompt = retrieval.task_text(history, topic, n + 1000)
        task = Task.objects.create(project=scene.project, user=scene.user, prompt=prompt)
        injected = inject_memories(task=task, prompt=prompt, goal=None).memory_ids
        used = [pk for pk in injected if topic_of.get(pk) == topic]
        if used:
            cited += len(
                memory_cite(task=task, memory_ids=used, via=FeedbackVia.RESULT_LINE).counted
            )
    never = (
        IdentityMemory.objects.filter(project=scene.project)
        .annotate(**memory_usage())
        .filter(cite_count=0, injection_count__gte=settings_value("NEVER_CITED_AFTER"))
        .count()
    )
    print(
        f"recall@5 of `relevant`, {len(rows)} memories, {len(tests)} new tasks, after "
        f"{TRAINING_TASKS} earlier tasks cited {cited} times ({never} memories injected "
        f"{settings_value('NEVER_CITED_AFTER')}+ times, never cited)"
    )
    for label, on in (("feedback off", False), ("feedback on", True)):
        settings.AUTOMEMORY_RANKING_FEEDBACK = on
        hits = precise = total = 0
        for topic, prompt in tests:
            plan_ids = _ranked_ids(scene, prompt)
            hits += any(topic_of.get(pk) == topic for pk in plan_ids)
            precise += sum(topic_of.get(pk) == topic for pk in plan_ids)
            total += len([pk for pk in plan_ids if pk in topic_of])
        print(
            f"  {label:>12}: recall@5 {hits / len(tests):.2f}, "
            f"on-topic share of the 5 {precise / max(total, 1):.2f}"
        )
    del settings.AUTOMEMORY_RANKING_FEEDBACK


def _ranked_ids(scene, prompt: str) -> list[int]:
    """The project memories a task with this prompt would receive (the preview's path: the
    same plan as injection, nothing written)."""
    from automemory.services.injector import memory_preview

    plan = memory_preview(user=scene.user, project_id=scene.project.pk, prompt=prompt, goal=None)
    return [m.pk for m in plan.fitted.project_memories] if plan.fitted else []


def settings_value(name: str):
    from automemory import conf

    return conf.get(name)


if __name__ == "__main__":
    main()
