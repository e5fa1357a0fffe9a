"""Benchmark: which memories a new task gets (`recent` vs `relevant`), and what it costs.

Prints, from one run on one database:
- recall@5: a synthetic project holds 240 memories over 24 topics (10 each, written from
  per-topic templates with varying details, created in shuffled order over 120 days); 100 new
  tasks, each about one topic and worded differently from its memories (other phrasings and
  synonyms: a task about deploys says "ship to production", "roll out", "release"). A task
  scores 1 when at least one memory of its topic is among the project memories injected.
  `recent` should stay near 5 / 24 topics; `relevant` should reach 0.9 or more.
  The same for a paraphrase set (`PARAPHRASES`: 48 English tasks that share no content word
  with their topic's memories, checked by the run through the full-text index itself, and 8
  in German, French, Spanish and Portuguese), and each set ranked by keywords alone (the
  embedding model off) and hybrid (keywords and meaning fused). Hybrid must beat keywords on
  the paraphrases and keep the keyword set's recall;
- the embedding pass's cost: the 240 memories embedded in batches, per memory;
- the injection's time (median of repeated runs) and queries, for both rankings, with 10,
  2,000 and 20,000 memories in the project, and the ratio of the time at 20,000 to 10.
  Queries are counted as data statements plus transaction control (BEGIN/COMMIT, which
  SQLite issues as statements); the target is 6 data statements or fewer.

    .venv/bin/python benchmarks/bench_retrieval.py                  # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_retrieval.py --postgres postgres://postgres@127.0.0.1:5432/postgres

With --postgres a throwaway database is created on the server named and dropped at the end;
`--save` writes the output to docs/figures/bench_retrieval.<database>.txt.
"""

import contextlib
import random
import re
import statistics
import time
from datetime import timedelta

import harness
from retrieval_set import DETAILS, PARAPHRASES, TASK_FILLERS, TOPICS

SIZES = (10, 2_000, 20_000)
MEMORIES_PER_TOPIC = 10
TASKS = 100
REPEATS = 21
SEED = 11
TRANSACTION_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)


def memory_text(rng: random.Random, topic: str, index: int) -> str:
    template = TOPICS[topic]["memory"][index % len(TOPICS[topic]["memory"])]
    return template.format(d=rng.choice(DETAILS)) + f" (note {index})"


def task_text(rng: random.Random, topic: str, index: int) -> str:
    template = TOPICS[topic]["task"][index % len(TOPICS[topic]["task"])]
    text = template.format(d=rng.choice(DETAILS))
    filler = rng.choice(TASK_FILLERS)
    return filler.format(t=text, lt=text[0].lower() + text[1:])


def main() -> None:
    args = harness.parser(__doc__).parse_args()
    with harness.run(args):
        bench_recall()
        bench_cost()


class Scene:
    """A user and a project with auto memory on, the user's settings set per run."""

    def __init__(self, name: str):
        from automemory.models import AutoMemorySettings
        from controlplane.models import IdentityMemory

        self.user = harness.user_create(name, use_memories=True, generate_memories=False)
        self.project = harness.project_create(self.user, name)
        self.settings = AutoMemorySettings.objects.get(user=self.user)
        for i in range(5):  # the user's own preferences, not about any topic
            IdentityMemory.objects.create(
                scope="user", user=self.user, content=f"I prefer small reviewable commits ({i})."
            )

    def rank_by(self, ranking: str) -> None:
        self.settings.injection_ranking = ranking
        self.settings.save(update_fields=["injection_ranking"])

    def planned_ids(self, prompt: str) -> list[int]:
        """The memories a new task with this prompt would receive (injection's plan, nothing
        written: the measured tasks leave no usage counts behind to sway the next)."""
        from automemory.services.injector import InjectionQuery, injection_plan, user_preferences

        query = InjectionQuery(
            user_id=self.user.pk, project_id=self.project.pk, prompt=prompt, goal=None
        )
        plan = injection_plan(query, preferences=user_preferences(user_id=self.user.pk))
        return plan.memory_ids

    def inject(self, prompt: str):
        from automemory.services.injector import inject_memories
        from controlplane.models import Task

        task = Task.objects.create(project=self.project, user=self.user, prompt=prompt)
        return inject_memories(task=task, prompt=prompt, goal=None)


def bench_recall() -> None:
    from django.utils import timezone
    from freezegun import freeze_time

    from automemory import ranking
    from controlplane.models import IdentityMemory

    rng = random.Random(SEED)
    scene = Scene("recall")
    rows = [(topic, i) for topic in TOPICS for i in range(MEMORIES_PER_TOPIC)]
    rng.shuffle(rows)
    topic_of: dict[int, str] = {}
    start = timezone.now() - timedelta(days=120)
    for position, (topic, i) in enumerate(rows):
        with freeze_time(start + timedelta(hours=12 * position)):
            created = IdentityMemory.objects.create(
                scope="project", project=scene.project, content=memory_text(rng, topic, i)
            )
        topic_of[created.pk] = topic
    embedding_cost(len(rows))
    topics = list(TOPICS)
    keyword_tasks = [
        (topics[n % len(topics)], task_text(rng, topics[n % len(topics)], n)) for n in range(TASKS)
    ]
    english = [(topic, text) for topic, text in PARAPHRASES if _is_english(text)]
    other = [(topic, text) for topic, text in PARAPHRASES if not _is_english(text)]
    shared = sum(
        any(
            topic_of.get(m.pk) == topic
            for m in ranking.memories_matching(
                text=text, scope="project", project_id=scene.project.pk, limit=len(rows)
            )
        )
        for topic, text in english
    )
    print(
        f"recall@5: {len(rows)} project memories over {len(topics)} topics "
        f"(chance with 5 random memories ~ {5 / len(topics):.2f}); paraphrases sharing a "
        f"word with their topic's memories (full-text match): {shared} of {len(english)}"
    )
    sets = {
        f"keyword set ({len(keyword_tasks)})": keyword_tasks,
        f"paraphrases ({len(english)})": english,
        f"other languages ({len(other)})": other,
    }
    print(f"  {'ranking':<22}" + "".join(f"{name:>24}" for name in sets))
    for label, ranking_name, model in (
        ("recent", "recent", ""),
        ("relevant, keywords", "relevant", ""),
        ("relevant, hybrid", "relevant", None),
    ):
        scene.rank_by(ranking_name)
        with embedding_model(model):
            recalls = [
                sum(
                    any(topic_of.get(pk) == topic for pk in scene.planned_ids(prompt))
                    for topic, prompt in tasks
                )
                / len(tasks)
                for tasks in sets.values()
            ]
        print(f"  {label:<22}" + "".join(f"{recall:>24.2f}" for recall in recalls))


def _is_english(text: str) -> bool:
    return text.isascii() and not any(
        word in text.split() for word in ("Die", "Les", "Los", "Traduire", "Wir", "A página")
    )


@contextlib.contextmanager
def embedding_model(name: str | None):
    """Rank with the embedding model `name` ("" = off: keywords alone; None = the default)."""
    from django.conf import settings

    if name is None:
        yield
        return
    settings.AUTOMEMORY_EMBEDDING_MODEL = name
    try:
        yield
    finally:
        del settings.AUTOMEMORY_EMBEDDING_MODEL


def embedding_cost(count: int) -> None:
    """Embed every pending memory as the sweeper does, and print what it cost."""
    from automemory import conf
    from automemory.services.vectors import embeddings_refresh

    done = embeddings_refresh(limit=100_000)
    assert done.unavailable is None and done.embedded >= count, done
    print(
        f"embedding pass: {done.embedded} memories in {done.seconds:.2f} s, batches of "
        f"{conf.get('EMBEDDING_BATCH_SIZE')}: {1000 * done.seconds / done.embedded:.1f} ms per "
        "memory (model time and the vectors' writes)"
    )


def vectors_fill(project_id: int) -> None:
    """Give every pending memory of the project a vector fast: each distinct text without
    its `(note N)` suffix is embedded once and its vector written for all that share it
    (the suffix moves a vector by a hair; this is for the cost runs, not recall)."""
    from django.db import connection, transaction

    from automemory.services import embeddings, vectors

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.memory_id, m.content FROM {vectors.TABLE} e"
            " JOIN identity_memories m ON m.id = e.memory_id"
            " WHERE e.pending AND m.project_id = %s",
            [project_id],
        )
        rows = cursor.fetchall()
    bases = sorted({_without_note(content) for _, content in rows})
    by_base = dict(zip(bases, embeddings.passage_vectors(bases), strict=True))
    vendor = connection.vendor
    bits = ", embedding_bits = vec_quantize_binary(%s)" if vendor == "sqlite" else ""
    cast = "" if vendor == "sqlite" else "::vector"
    sql = (
        f"UPDATE {vectors.TABLE} SET embedding = %s{cast}{bits}, model = %s, pending = FALSE"
        " WHERE memory_id = %s"
    )
    model = embeddings.model_name()
    params = []
    for memory_id, content in rows:
        value = vectors.vector_param(by_base[_without_note(content)], vendor)
        params.append([value, value, model, memory_id] if bits else [value, model, memory_id])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _without_note(content: str) -> str:
    return re.sub(r" \(note \d+\)$", "", content)


def iter_calls(calls: list):
    """One call after another, each time the result is called (a fresh text each time)."""
    pending = iter(calls)
    return lambda: next(pending)()


def bench_cost() -> None:
    from django.db import connection

    from automemory.services import embeddings
    from controlplane.models import IdentityMemory

    rng = random.Random(SEED + 1)
    topics = list(TOPICS)
    prompts = [task_text(rng, topics[n % len(topics)], n) for n in range(REPEATS)]
    query_embedding = harness.timed(
        iter_calls([lambda text=text: embeddings.query_vector(text) for text in prompts]),
        repeats=REPEATS,
        warmup=0,
    )
    print(
        f"a task text's vector (embedded once per text and process, then kept): "
        f"{query_embedding.median_ms:.1f} / {query_embedding.best_ms:.1f} ms median / best"
    )
    print(
        f"injection cost over {REPEATS} runs, the texts' vectors kept: ms median / best; "
        "queries: data statements + transaction control (most in one run)"
    )
    results: dict[str, dict[int, tuple[float, float, int, int]]] = {"recent": {}, "relevant": {}}
    for size in SIZES:
        scene = Scene(f"cost-{size}")
        IdentityMemory.objects.bulk_create(
            [
                IdentityMemory(
                    scope="project",
                    project=scene.project,
                    content=memory_text(rng, topics[i % len(topics)], i),
                )
                for i in range(size)
            ],
            batch_size=2000,
        )
        vectors_fill(scene.project.pk)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        for ranking in results:
            scene.rank_by(ranking)
            scene.inject(prompts[0])  # warm the statement and page caches
            results[ranking][size] = measure(scene, prompts)
    for ranking, by_size in results.items():
        for size, (median, best, data, control) in by_size.items():
            print(
                f"  {ranking:>8} {size:>7,} memories: {median:7.2f} / {best:7.2f} ms, "
                f"{data} + {control} queries"
            )
        (median_few, best_few, *_), (median_many, best_many, *_) = (
            by_size[SIZES[0]],
            by_size[SIZES[-1]],
        )
        print(
            f"  {ranking:>8} time at {SIZES[-1]:,} / at {SIZES[0]:,}: "
            f"median x{median_many / median_few:.2f}, best x{best_many / best_few:.2f}"
        )


def measure(scene: Scene, prompts: list[str]) -> tuple[float, float, int, int]:
    from automemory.services.injector import inject_memories
    from controlplane.models import Task

    timings, data, control = [], [], []
    for prompt in prompts:
        task = Task.objects.create(project=scene.project, user=scene.user, prompt=prompt)
        with harness.captured() as capture:
            start = time.perf_counter()
            result = inject_memories(task=task, prompt=prompt, goal=None)
            timings.append((time.perf_counter() - start) * 1000)
        assert len(result.memory_ids) == 10, result.memory_ids
        statements = capture.statements
        transaction_control = sum(bool(TRANSACTION_CONTROL.match(sql)) for sql in statements)
        data.append(len(statements) - transaction_control)
        control.append(transaction_control)
    return statistics.median(timings), min(timings), max(data), max(control)


if __name__ == "__main__":
    main()
