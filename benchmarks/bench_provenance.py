"""Benchmark: provenance removal and the private-content check, by text size.

Prints the median milliseconds of:
- removing 10 injected memories (echoed as a block, then prose) from results of 10,000,
  100,000 and 1,000,000 characters;
- checking a text of those sizes against 10 memory fingerprints;
- fingerprinting 100 and 1,000 memories of about 250 characters, the first time and again
  (the per-process cache).

    .venv/bin/python benchmarks/bench_provenance.py

No database: the functions measured are pure.
"""

import os
import random
import statistics
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from automemory.services import provenance  # noqa: E402
from automemory.services.injector import render_memory_block  # noqa: E402
from controlplane.models import IdentityMemory  # noqa: E402

WORDS = [
    "the",
    "a",
    "session",
    "check",
    "login",
    "fix",
    "deploy",
    "release",
    "api",
    "user",
    "token",
    "cache",
    "build",
    "test",
    "run",
    "make",
    "file",
    "path",
    "retry",
    "queue",
    "worker",
]
REPEATS = 5


def prose(words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) + ("." if rng.random() < 0.1 else "") for _ in range(words))


def median_ms(run, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    rng = random.Random(8)
    memories = [
        IdentityMemory(pk=i, scope="user", user_id=1, content=f"note {i} {prose(45, rng)}")
        for i in range(10)
    ]
    fingerprints = [provenance.memory_fingerprint(memory) for memory in memories]
    block = render_memory_block(memories[:5], memories[5:])
    for size in (10_000, 100_000, 1_000_000):
        text = (f"Result for: {block}\n{prose(size // 6, rng)}")[:size]
        removal = median_ms(
            lambda text=text: provenance.injected_text_removed(text, fingerprints=fingerprints)
        )
        check = median_ms(
            lambda text=text: provenance.matching_fingerprints(text, fingerprints=fingerprints)
        )
        print(f"result of {size:>9,} characters: removal {removal:7.1f} ms, check {check:7.1f} ms")
    for count in (100, 1000):
        contents = [prose(40, rng) for _ in range(count)]

        def fingerprint_all(contents=contents):
            for content in contents:
                provenance.fingerprint_text(content)

        provenance._text_fingerprint.cache_clear()
        first = median_ms(fingerprint_all, repeats=1)
        again = median_ms(fingerprint_all)
        print(f"fingerprint {count:>5,} memories: first {first:7.1f} ms, cached {again:7.1f} ms")


if __name__ == "__main__":
    main()
