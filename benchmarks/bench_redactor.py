"""Benchmark the redactor and compare it with detect-secrets on the same corpus.

Run from the repository root::

    .venv/bin/python benchmarks/bench_redactor.py [--quick] [--cpu] [--baseline FILE]
        [--redactor-root DIR] [--samples FILE.jsonl] [--save]

It prints, in one run:

1. throughput of ``redact()`` on ~1 MB of realistic agent output (code, logs, diffs,
   JSON, prose, with a few secrets sprinkled in);
2. every adversarial input (tests/automemory/redactor/adversarial.py) at the same size, and the
   worst one's time as a ratio of the ordinary text's;
3. recall / false-positive rate / MB/s on the labelled corpus (tests/automemory/redactor/corpus.py),
   whole, its syntax part (short values, every assignment syntax, newer provider
   formats) and its disguised part (secrets in disguise, the residue forms and the
   reference forms that were damaged), for this redactor and for detect-secrets used as a
   library (default plugins and filters, ``detect_secrets.core.scan.scan_line``), plus
   detect-secrets' MB/s on the 1 MB agent output;
4. with ``--samples FILE.jsonl``, recall and changed negatives on an external labelled set:
   one JSON object a line, ``{"rule": ..., "kind": "tp"|"fp", "text": ..., "secrets": [...]}``
   (e.g. another scanner's rule samples, exported outside this repository).

``--baseline FILE`` also measures another redactor module (any file defining ``redact``,
e.g. ``git show <rev>:automemory/services/redactor.py > /tmp/old.py``) on the same text
and corpus in the same run, for before/after figures on one machine state.
``--redactor-root DIR`` measures the ``automemory`` package found in DIR instead (an older
copy of the package, e.g. ``git archive <rev> automemory | tar -x -C DIR``) on this
checkout's text and corpus; ``--cpu`` times with the process CPU clock, steadier than the
wall clock on a shared machine.

``--save`` writes the output to docs/figures/bench_redactor.txt. This is a benchmark, not a
test: nothing here asserts timings.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import harness

# --redactor-root DIR must take effect before the first import of the redactor below.
if "--redactor-root" in sys.argv:
    sys.path.insert(0, sys.argv[sys.argv.index("--redactor-root") + 1])
CLOCK = time.process_time if "--cpu" in sys.argv else time.perf_counter

from automemory.services.redactor import RULES, redact  # noqa: E402
from tests.automemory.redactor.adversarial import ADVERSARIAL  # noqa: E402
from tests.automemory.redactor.corpus import Sample, build_corpus, build_syntax_corpus  # noqa: E402
from tests.automemory.redactor.corpus_disguised import build_disguised_corpus  # noqa: E402

ROOT = harness.BASE_DIR

MB = 1_000_000


# --------------------------------------------------------------------------------------
# Realistic agent output
# --------------------------------------------------------------------------------------


def _source_files() -> list[Path]:
    """Python sources to quote: this project, then Django (stable, always installed).

    The redactor's own rule files are left out: their samples would change the text with
    every rule added.
    """
    files = sorted(
        p
        for d in ("automemory", "controlplane", "worker")
        for p in (ROOT / d).rglob("*.py")
        if "redactor" not in p.parts and p.name != "redactor.py"
    )
    try:
        import django

        files += sorted(Path(django.__file__).parent.joinpath("contrib").rglob("*.py"))
    except ImportError:  # pragma: no cover - Django is a project dependency
        pass
    return files


_PROSE = [
    "I looked at the failing test first. The fixture creates a user but never logs in, "
    "so the request is anonymous and the view returns 401 instead of 200.",
    "Next I will update the serializer so that the token field is write-only, then rerun "
    "the suite. The access token should never be echoed back in a response body.",
    "The migration adds a nullable column, backfills it in batches of 1000 and only then "
    "adds the NOT NULL constraint, so it is safe on a large table.",
    "Summary: fixed the race in the worker loop (claim with SELECT ... FOR UPDATE SKIP "
    "LOCKED), added a regression test, and documented the retry policy in docs/worker.md.",
]


def _log_block(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(5, 20)):
        rid = "".join(rng.choice("0123456789abcdef") for _ in range(32))
        lines.append(
            f"2024-05-0{rng.randint(1, 9)}T12:{i:02d}:{rng.randint(10, 59)}Z INFO "
            f"request_id={rid} method=GET path=/api/tasks/{rng.randint(1, 999)}/ "
            f"status={rng.choice([200, 200, 201, 404])} duration_ms={rng.randint(3, 900)}"
        )
    return "\n".join(lines)


def _pytest_block(rng: random.Random) -> str:
    names = ["test_create_task", "test_password_reset", "test_token_refresh", "test_quota"]
    out = ["============================= test session starts =============================="]
    for n in names:
        out.append(f"tests/test_api.py::{n} {rng.choice(['PASSED', 'PASSED', 'FAILED'])}")
    out.append(f"========= {rng.randint(50, 300)} passed, 1 failed in {rng.random() * 9:.2f}s ==")
    return "\n".join(out)


def _diff_block(src: str, path: str) -> str:
    lines = src.splitlines()[:30]
    body = "\n".join((" " if i % 5 else "-") + line for i, line in enumerate(lines))
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,30 +1,30 @@\n{body}"


def build_agent_output(size: int = MB, seed: int = 7) -> str:
    """Deterministic ~``size`` characters of agent transcript with a few real-looking secrets."""
    rng = random.Random(seed)
    sources = [(p, p.read_text(encoding="utf-8", errors="replace")) for p in _source_files()]
    secrets = [s.text for s in build_corpus() if s.positive]
    parts: list[str] = []
    total = 0
    while total < size:
        kind = rng.random()
        if kind < 0.45:
            path, src = rng.choice(sources)
            start = rng.randint(0, max(0, len(src) - 3000))
            chunk = f"$ sed -n 1,80p {path.name}\n" + src[start : start + rng.randint(800, 3000)]
        elif kind < 0.6:
            path, src = rng.choice(sources)
            chunk = _diff_block(src, path.name)
        elif kind < 0.75:
            chunk = _log_block(rng)
        elif kind < 0.85:
            chunk = _pytest_block(rng)
        elif kind < 0.995:
            chunk = rng.choice(_PROSE)
        else:
            chunk = rng.choice(secrets)  # ~0.5% of chunks carry a credential
        parts.append(chunk)
        total += len(chunk) + 1
    return "\n".join(parts)[:size]


# --------------------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------------------


def _best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = CLOCK()
        fn()
        best = min(best, CLOCK() - start)
    return best


def score(corpus: list[Sample], redact_fn: Callable[[str], str]) -> tuple[float, float]:
    """(recall, false-positive rate): secrets gone from output / negatives changed."""
    caught = total = 0
    negatives = changed = 0
    for sample in corpus:
        out = redact_fn(sample.text)
        if sample.positive:
            for secret in sample.secrets:
                total += 1
                caught += secret not in out
        else:
            negatives += 1
            changed += out != sample.text
    return caught / total, changed / negatives


class DetectSecrets:
    """detect-secrets as a library: default plugins and filters, ``scan_line`` per line.

    With ``entropy=False`` the two high-entropy plugins are left out (the usual way to
    quiet detect-secrets on hashes and ids); everything else stays default.
    """

    def __init__(self, entropy: bool = True) -> None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings, transient_settings

        self._scan_line = scan_line
        if entropy:
            self._ctx = default_settings()
        else:
            plugins = [
                {"name": cls.__name__}
                for cls in get_mapping_from_secret_type_to_class().values()
                if "HighEntropy" not in cls.__name__
            ]
            self._ctx = transient_settings({"plugins_used": plugins})
        self._ctx.__enter__()

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)

    def findings(self, line: str) -> list[str]:
        return [s.secret_value or "" for s in self._scan_line(line)]

    def redact_values(self, text: str) -> str:
        """Replace each reported secret value (what a span-based redactor would do)."""
        out = []
        for line in text.split("\n"):
            for value in sorted(set(self.findings(line)), key=len, reverse=True):
                if value:
                    line = line.replace(value, "[REDACTED]")
            out.append(line)
        return "\n".join(out)

    def redact_lines(self, text: str) -> str:
        """Drop every flagged line entirely (the most generous use of a line scanner)."""
        return "\n".join("[REDACTED]" if self.findings(line) else line for line in text.split("\n"))

    def scan_all(self, lines: Iterable[str]) -> int:
        return sum(len(self.findings(line)) for line in lines)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def _load_baseline(path: str) -> Callable[[str], str]:
    spec = importlib.util.spec_from_file_location("baseline_redactor", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_redactor"] = module
    spec.loader.exec_module(module)
    return module.redact


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, database=False)
    parser.add_argument("--size", type=int, default=MB, help="agent-output size (chars)")
    parser.add_argument("--quick", action="store_true", help="skip detect-secrets on 1 MB")
    parser.add_argument("--baseline", metavar="FILE", help="also measure this redactor module")
    parser.add_argument("--samples", metavar="FILE", help="also score a labelled JSONL sample set")
    parser.add_argument("--redactor-root", metavar="DIR", help="measure DIR's automemory package")
    parser.add_argument("--cpu", action="store_true", help="time with the process CPU clock")
    args = parser.parse_args(argv)
    with harness.run(args, database=False):
        run(args)


def run(args) -> None:
    redactors: list[tuple[str, Callable[[str], str]]] = [("this redactor", redact)]
    if args.baseline:
        redactors.append((f"baseline {Path(args.baseline).name}", _load_baseline(args.baseline)))

    text = build_agent_output(args.size)
    size_mb = len(text.encode()) / MB
    anchors = {anchor for rule in RULES for anchor in rule.anchors}
    print(f"Python {sys.version.split()[0]}; agent output {len(text):,} chars ({size_mb:.2f} MB)")
    import automemory.services.redactor as measured

    print(f"{len(RULES)} rules, {len(anchors)} distinct anchors; {measured.__file__}")
    print(f"clock: {'process CPU time' if args.cpu else 'wall time'}")

    for label, redact_fn in redactors:
        # 1. throughput on ordinary text
        t_ordinary = _best_time(lambda redact_fn=redact_fn: redact_fn(text), repeat=5)
        n_redacted = redact_fn(text).count("[REDACTED]")
        print(
            f"\n[{label}] 1 MB agent output: {t_ordinary * 1000:.1f} ms -> "
            f"{size_mb / t_ordinary:.1f} MB/s ({n_redacted} redactions)"
        )

        # 2. adversarial inputs of the same size
        print(f"[{label}] adversarial inputs, {len(text):,} chars each (ratio to ordinary):")
        worst_name, worst = "", 0.0
        for name, make in ADVERSARIAL.items():
            adv = make(len(text))
            t = _best_time(lambda adv=adv, redact_fn=redact_fn: redact_fn(adv), repeat=2)
            print(f"  {name:45s} {t * 1000:8.1f} ms  x{t / t_ordinary:5.2f}")
            if t > worst:
                worst_name, worst = name, t
        print(f"  worst: {worst_name!r} {worst * 1000:.1f} ms = x{worst / t_ordinary:.2f} ordinary")
        if label == "this redactor":
            t_this = t_ordinary

    # 3. labelled corpus, side by side
    for title, corpus in (
        ("Labelled corpus", build_corpus()),
        ("Syntax part (short values, every syntax, newer providers)", build_syntax_corpus()),
        ("Disguised part (disguises, residue, reference forms)", build_disguised_corpus()),
    ):
        _print_corpus_table(title, corpus, redactors)
    if args.samples:
        for label, redact_fn in redactors:
            _print_samples(label, Path(args.samples), redact_fn)

    if not args.quick:
        ds = DetectSecrets(entropy=True)
        try:
            lines = text.split("\n")
            start = time.perf_counter()
            hits = ds.scan_all(lines)
            t_ds = time.perf_counter() - start
            print(
                f"\n[detect-secrets default] 1 MB agent output: {t_ds:.2f} s -> "
                f"{size_mb / t_ds:.2f} MB/s ({hits} findings); redactor {size_mb / t_this:.1f}"
                f" MB/s, x{t_ds / t_this:.0f} faster"
            )
        finally:
            ds.close()


def _print_samples(label: str, path: Path, redact_fn: Callable[[str], str]) -> None:
    """Recall (each listed secret gone) and changed negatives on an external sample set."""
    import json

    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    caught = total = negatives = changed = 0
    missed: dict[str, int] = {}
    for record in records:
        out = redact_fn(record["text"])
        if record["kind"] == "tp":
            for secret in record.get("secrets") or ():
                total += 1
                if secret in out:
                    missed[record["rule"]] = missed.get(record["rule"], 0) + 1
                else:
                    caught += 1
        else:
            negatives += 1
            changed += out != record["text"]
    print(
        f"\n[{label}] {path.name}: recall {caught / max(total, 1):.2%} of {total} secrets "
        f"({len(records) - negatives} samples); {changed} of {negatives} negatives changed"
    )
    worst = sorted(missed.items(), key=lambda kv: -kv[1])[:8]
    print("  most missed: " + ", ".join(f"{rule} {n}" for rule, n in worst))


def _print_corpus_table(
    title: str, corpus: list[Sample], redactors: list[tuple[str, Callable[[str], str]]]
) -> None:
    corpus_mb = sum(len(s.text.encode()) for s in corpus) / MB
    n_pos = sum(s.positive for s in corpus)
    n_secrets = sum(len(s.secrets) for s in corpus)
    print(
        f"\n{title}: {len(corpus)} samples ({n_pos} positive with {n_secrets} secrets, "
        f"{len(corpus) - n_pos} negative), {corpus_mb * 1000:.0f} kB"
    )
    rows = []
    for label, redact_fn in redactors:
        t = _best_time(lambda redact_fn=redact_fn: [redact_fn(s.text) for s in corpus], repeat=5)
        recall, fp = score(corpus, redact_fn)
        rows.append((label, recall, fp, corpus_mb / t))

    for entropy in (False, True):
        label = "detect-secrets " + ("default plugins" if entropy else "w/o entropy plugins")
        ds = DetectSecrets(entropy=entropy)
        try:
            t = _best_time(
                lambda ds=ds: [ds.findings(line) for s in corpus for line in s.text.split("\n")], 1
            )
            recall, fp = score(corpus, ds.redact_values)
            rows.append((f"{label}, reported values", recall, fp, corpus_mb / t))
            recall, fp = score(corpus, ds.redact_lines)
            rows.append((f"{label}, whole flagged lines", recall, fp, corpus_mb / t))
        finally:
            ds.close()
    print(f"  {'':55s} {'recall':>8s} {'false pos':>10s} {'MB/s':>8s}")
    for name, recall, fp, mbps in rows:
        print(f"  {name:55s} {recall:8.2%} {fp:10.2%} {mbps:8.2f}")


if __name__ == "__main__":
    main()
