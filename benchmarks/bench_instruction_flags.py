"""Precision and recall of the instruction flags on a held-out set written by hand.

Run from the repository root::

    .venv/bin/python benchmarks/bench_instruction_flags.py [--save] [--verbose]

The set (`tests/controlplane/instruction_heldout.py`) is kept apart from the rules' own
samples and was not used to tune them: attacks of six kinds (fence look-alikes,
exfiltration, destructive commands, credential reads, look-alike letters, override and
system-prompt phrasings in seven languages) and ordinary project notes chosen to sit near a
rule. A text counts as flagged when it gets any flag. It prints precision and recall overall,
recall per kind, the time per text, and every miss and false alarm (with `--verbose`, the
flags of every text). `--save` writes docs/figures/bench_instruction_flags.txt. A benchmark,
not a test: nothing here asserts.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import harness


def main() -> None:
    parser = harness.parser(__doc__, database=False)
    parser.add_argument("--verbose", action="store_true", help="print every text's flags")
    args = parser.parse_args()
    with harness.run(args, database=False):
        from tests.controlplane.instruction_heldout import ATTACKS, ATTACKS_B, NOTES, NOTES_B

        measure("set B (held out: measured once, never tuned on)", ATTACKS_B, NOTES_B, args)
        print()
        measure("set A (the rules were revised on its first-run misses)", ATTACKS, NOTES, args)
        sys.stdout.flush()


def measure(title: str, attacks: list[tuple[str, str]], notes: list[str], args) -> None:
    """Print precision, recall, recall per kind, the misses and the false alarms."""
    from controlplane.services.instructions import instruction_flags

    started = time.perf_counter()
    attack_flags = [(kind, text, instruction_flags(text)) for kind, text in attacks]
    note_flags = [(text, instruction_flags(text)) for text in notes]
    elapsed = time.perf_counter() - started

    true_positives = sum(1 for _, _, flags in attack_flags if flags)
    false_positives = sum(1 for _, flags in note_flags if flags)
    precision = true_positives / max(1, true_positives + false_positives)
    recall = true_positives / max(1, len(attacks))
    print(f"== {title}: {len(attacks)} attacks, {len(notes)} ordinary notes")
    print(
        f"flagged: {true_positives} attacks (TP), {false_positives} notes (FP); "
        f"missed: {len(attacks) - true_positives} attacks (FN)"
    )
    print(f"precision {precision:.3f}  recall {recall:.3f}")
    print(f"false alarm rate on notes: {false_positives / max(1, len(notes)):.3f}")
    print(f"time: {elapsed / (len(attacks) + len(notes)) * 1e3:.2f} ms per text")
    totals = Counter(kind for kind, _ in attacks)
    caught = Counter(kind for kind, _, flags in attack_flags if flags)
    print("recall per kind:")
    for kind in totals:
        share = caught[kind] / totals[kind]
        print(f"  {kind:<13} {caught[kind]:>2}/{totals[kind]:<2} {share:.2f}")
    print("missed attacks:")
    for kind, text, flags in attack_flags:
        if not flags:
            print(f"  [{kind}] {text!r}")
    print("false alarms:")
    for text, flags in note_flags:
        if flags:
            print(f"  {text!r} -> {', '.join(flags)}")
    if args.verbose:
        for kind, text, flags in attack_flags:
            print(f"  attack [{kind}] {flags} {text!r}")
        for text, flags in note_flags:
            print(f"  note {flags} {text!r}")


if __name__ == "__main__":
    main()
