"""Benchmark: provenance removal and the private-content check, by text size.

Prints the median milliseconds of:
- removing 10 injected memories (echoed as a block, then prose) from results of 10,000,
  100,000 and 1,000,000 characters;
- checking a text of those sizes against 10 memory fingerprints;
- fingerprinting 100 and 1,000 memories of about 250 characters, the first time and again
  (the per-process cache).

    .venv/bin/python benchmarks/bench_provenance.py

No database: the functions measured are pure. `--save` writes the output to
docs/figures/bench_provenance.txt.
"""

import random

import harness

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


def median_ms(call, repeats: int = REPEATS) -> float:
    return harness.timed(call, repeats=repeats, warmup=0).median_ms


def main() -> None:
    args = harness.parser(__doc__, database=False).parse_args()
    with harness.run(args, database=False):
        run()


def run() -> None:
    from automemory.services import provenance
    from automemory.services.memory_block import render_memory_block
    from controlplane.models import IdentityMemory

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
