"""Recall and false-positive rate of the redactor on the labelled synthetic corpus."""

from __future__ import annotations

from collections import Counter

import pytest

from automemory.services.redactor import RULES, find_secrets, redact
from tests.automemory.redactor.corpus import build_corpus

MIN_RECALL = 0.99
MAX_FP_RATE = 0.02


def score(redact_fn=redact) -> dict[str, object]:
    """Recall (secrets gone from the output) and FP rate (negatives changed at all)."""
    corpus = build_corpus()
    caught = total = 0
    missed: list[tuple[str, str, str]] = []
    for sample in corpus:
        if not sample.positive:
            continue
        out = redact_fn(sample.text)
        for secret in sample.secrets:
            total += 1
            if secret in out:
                missed.append((sample.kind, sample.context, sample.text[:160]))
            else:
                caught += 1
    negatives = [s for s in corpus if not s.positive]
    false_alarms = [s for s in negatives if redact_fn(s.text) != s.text]
    return {
        "recall": caught / total,
        "secrets": total,
        "missed": missed,
        "fp_rate": len(false_alarms) / len(negatives),
        "negatives": len(negatives),
        "false_alarms": [(s.kind, s.text[:160]) for s in false_alarms],
    }


def test_corpus_recall_and_false_positive_rate() -> None:
    result = score()
    print(
        f"\nredactor corpus: recall {result['recall']:.2%} of {result['secrets']} secrets, "
        f"false positives {result['fp_rate']:.2%} of {result['negatives']} negatives"
    )
    assert result["recall"] >= MIN_RECALL, result["missed"]
    assert result["fp_rate"] <= MAX_FP_RATE, result["false_alarms"]


def test_corpus_is_large_and_varied() -> None:
    corpus = build_corpus()
    positives = [s for s in corpus if s.positive]
    negatives = [s for s in corpus if not s.positive]
    assert len(positives) >= 500 and len(negatives) >= 400
    contexts = Counter(s.context for s in positives)
    for ctx in ("env", "json", "yaml", "code", "curl", "prose", "log"):
        assert contexts[ctx] >= 20, ctx
    assert build_corpus() == corpus, "corpus must be deterministic"


# The corpus covers every syntax the redactor promises, with secrets and
# look-alike negatives in each.
SYNTAXES = [
    *("shell", "env", "yaml", "json", "json-escaped", "toml", "ini", "xml", "hcl"),
    *("go", "java", "csharp", "php", "ruby", "js", "ts", "kotlin", "python"),
    *("makefile", "dockerfile", "cli", "k8s", "dotnet"),
]


@pytest.mark.parametrize("syntax", SYNTAXES)
def test_corpus_covers_every_syntax(syntax: str) -> None:
    corpus = build_corpus()
    positives = [s for s in corpus if s.positive and s.context in (syntax, syntax + "-json")]
    negatives = [s for s in corpus if not s.positive and s.kind.endswith(":" + syntax)]
    assert len(positives) >= 3, syntax
    assert negatives, syntax


def test_every_rule_is_exercised_by_the_corpus() -> None:
    fired: Counter[str] = Counter()
    for sample in build_corpus():
        if sample.positive:
            fired.update(name for name, _s, _e in find_secrets(sample.text, merge=False))
    unused = [rule.name for rule in RULES if fired[rule.name] == 0]
    assert not unused, f"rules with no corpus positive: {unused}"


def test_negatives_have_no_findings_at_all() -> None:
    for sample in build_corpus():
        if not sample.positive:
            assert find_secrets(sample.text) == [], sample.text
