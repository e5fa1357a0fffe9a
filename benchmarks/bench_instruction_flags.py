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
        from controlplane.services.instructions import instruction_flags
        from tests.controlplane.instruction_heldout import ATTACKS, NOTES

        started = time.perf_counter()
        attack_flags = [(kind, text, instruction_flags(text)) for kind, text in ATTACKS]
        note_flags = [(text, instruction_flags(text)) for text in NOTES]
        elapsed = time.perf_counter() - started

        true_positives = sum(1 for _, _, flags in attack_flags if flags)
        false_positives = sum(1 for _, flags in note_flags if flags)
        false_negatives = len(ATTACKS) - true_positives
        precision = true_positives / max(1, true_positives + false_positives)
        recall = true_positives / max(1, len(ATTACKS))
        print(f"held-out set: {len(ATTACKS)} attacks, {len(NOTES)} ordinary notes")
        print(
            f"flagged: {true_positives} attacks (TP), {false_positives} notes (FP); "
            f"missed: {false_negatives} attacks (FN)"
        )
        print(f"precision {precision:.3f}  recall {recall:.3f}")
        print(f"false alarm rate on notes: {false_positives / max(1, len(NOTES)):.3f}")
        per_text = elapsed / (len(ATTACKS) + len(NOTES)) * 1e3
        print(f"time: {per_text:.2f} ms per text")
        print()
        totals = Counter(kind for kind, _ in ATTACKS)
        caught = Counter(kind for kind, _, flags in attack_flags if flags)
        print("recall per kind:")
        for kind in totals:
            share = caught[kind] / totals[kind]
            print(f"  {kind:<13} {caught[kind]:>2}/{totals[kind]:<2} {share:.2f}")
        flag_counts = Counter(flag for _, _, flags in attack_flags for flag in flags)
        print(
            "flags raised on attacks:", ", ".join(f"{f} {n}" for f, n in flag_counts.most_common())
        )
        print()
        print("missed attacks:")
        for kind, text, flags in attack_flags:
            if not flags:
                print(f"  [{kind}] {text!r}")
        print("false alarms:")
        for text, flags in note_flags:
            if flags:
                print(f"  {text!r} -> {', '.join(flags)}")
        if args.verbose:
            print()
            for kind, text, flags in attack_flags:
                print(f"  attack [{kind}] {flags} {text!r}")
            for text, flags in note_flags:
                print(f"  note {flags} {text!r}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
