"""How fast the text normaliser (controlplane/textnorm.py) reads the worst text for it.

The instruction flags and the provenance check read every memory, note and result through
it, so it must stay linear: for each worst case (runs of invisible characters, marks without
letters, zero-width characters inside words, tag characters, emoji sequences, Persian with
its zero-width non-joiner, plain ASCII) it prints the milliseconds to read 1 MB and 125 KB
with `text_as_read`, `hidden_text` and `words_with_spans`, and their ratio (8 for linear
work, 64 for quadratic).

    .venv/bin/python benchmarks/bench_textnorm.py [--repeats 5] [--save]
"""

from __future__ import annotations

import harness

ONE_MB = 1_000_000


def main() -> None:
    parser = harness.parser(__doc__, database=False)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with harness.run(args, database=False):
        from controlplane.textnorm import hidden_text, text_as_read, words_with_spans
        from tests.controlplane.instruction_samples import ENGLAND_FLAG, tags

        cases = {
            "invisible-run": "\u200b",
            "marks-without-letters": "\u0301",
            "zero-width-in-words": "ig\u2063nore\u3164",
            "tags": tags("ignore "),
            "flags-and-emoji": ENGLAND_FLAG + "\u2764\ufe0f\u200d",
            "persian": "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 ",
            "ascii": "Run make test before pushing. ",
        }
        readers = {
            "text_as_read": text_as_read,
            "hidden_text": hidden_text,
            "words_with_spans": lambda text: sum(1 for _ in words_with_spans(text)),
        }
        print(f"best of {args.repeats}; milliseconds for 1 MB, and 1 MB / 125 KB")
        print(f"{'':24}" + "".join(f"{name:>26}" for name in readers))
        for label, unit in cases.items():
            large = unit * (ONE_MB // len(unit))
            small = unit * (ONE_MB // 8 // len(unit))
            cells = []
            for read in readers.values():
                big, little = (
                    harness.timed(lambda read=read, text=text: read(text), repeats=args.repeats)
                    for text in (large, small)
                )
                cells.append(f"{big.best_ms:12.1f} (x{big.best_ms / little.best_ms:5.1f})")
            print(f"{label:24}" + "".join(f"{cell:>26}" for cell in cells))


if __name__ == "__main__":
    main()
