"""What one code signature check costs a worker (worker/code_signature.py).

Run from the repository root::

    .venv/bin/python benchmarks/bench_code_signature.py [--repeats N] [--save]

It signs this checkout's `controlplane`, `automemory` and `worker` (and the Django, mcp and
openai versions) as a worker does:

1. **cold**: a new signer, every file read and hashed (a worker's start-up);
2. **check**: the same signer again, nothing changed (every `WORKER_CODE_CHECK_SECONDS`,
   between tasks): one `stat` a file, the versions read again;
3. **check after one edit**: one file rewritten with new bytes before each check;
4. the distribution versions alone (`importlib.metadata`).

Wall-clock and process CPU milliseconds (median and best; on a shared machine the CPU
figure is the steadier). No database. ``--save`` writes docs/figures/bench_code_signature.txt.
This is a benchmark, not a test: nothing here asserts timings.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import harness


def measure(call: Callable[[], object], *, repeats: int, before=None) -> tuple[float, ...]:
    """(wall median, wall best, cpu median, cpu best) in ms of `call()`, `before()` untimed."""
    call()
    wall, cpu = [], []
    for _ in range(repeats):
        if before is not None:
            before()
        started, started_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return statistics.median(wall), min(wall), statistics.median(cpu), min(cpu)


def main() -> None:
    arguments = harness.parser(__doc__, database=False)
    arguments.add_argument("--repeats", type=int, default=50, help="timed calls per figure")
    args = arguments.parse_args()
    with harness.run(args, database=False):
        from importlib import metadata

        from worker.code_signature import DISTRIBUTIONS, PACKAGES, RACY_SECONDS, CodeSigner

        signature = CodeSigner().compute()
        size = sum(
            (harness.BASE_DIR / path).stat().st_size
            for path in signature.files
            if (harness.BASE_DIR / path).exists()
        )
        print(
            f"signed: {len(signature.files)} files of {', '.join(PACKAGES)}, {size / 1024:.0f} KiB"
        )
        print(f"versions: {', '.join(f'{n} {v}' for n, v in signature.versions.items())}")
        print(f"{'':34} {'wall median':>12} {'wall best':>10} {'cpu median':>11} {'cpu best':>9}")

        def row(label: str, figures: tuple[float, ...]) -> None:
            print(
                f"{label:34} "
                + " ".join(f"{f:>{w}.2f}" for f, w in zip(figures, (12, 10, 11, 9), strict=True))
            )

        row("cold (start-up), ms", measure(lambda: CodeSigner().compute(), repeats=args.repeats))
        signer = CodeSigner()
        row("check, nothing changed, ms", measure(signer.compute, repeats=args.repeats))

        # One edited file, in a copy of the apps (the checkout is left alone).
        with tempfile.TemporaryDirectory() as folder:
            roots = {}
            for name, root in CodeSigner().roots.items():
                roots[name] = Path(folder) / name
                shutil.copytree(root, roots[name], ignore=shutil.ignore_patterns("__pycache__"))
            edited = roots["automemory"] / "conf.py"
            original = edited.read_text()
            count = iter(range(10**9))
            time.sleep(RACY_SECONDS + 0.1)  # fresh copies are re-read until they settle
            copy_signer = CodeSigner(roots=roots)
            copy_signer.compute()
            row(
                "check after one edit, ms",
                measure(
                    copy_signer.compute,
                    repeats=args.repeats,
                    before=lambda: edited.write_text(f"{original}\n# {next(count)}\n"),
                ),
            )
        row(
            "versions alone, ms",
            measure(lambda: [metadata.version(n) for n in DISTRIBUTIONS], repeats=args.repeats),
        )


if __name__ == "__main__":
    main()
