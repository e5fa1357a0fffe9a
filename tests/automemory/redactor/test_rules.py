"""Every rule against its own samples (the proof each rule carries, gitleaks style).

A true positive marks each secret with ``«…»``: the text without the marks must come out
of ``redact`` with exactly those parts replaced, and the rule itself must be among the
findings.  A false positive must come out unchanged, with no finding at all.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from automemory.services.redactor import REDACTED, RULES, Rule, find_secrets, redact

_MARKED = re.compile("«([^»]*)»")


def _cases(kind: str) -> list[tuple[Rule, str]]:
    return [
        (rule, sample)
        for rule in RULES
        for sample in (rule.true_positives if kind == "tp" else rule.false_positives)
    ]


def _id(case: tuple[Rule, str]) -> str:
    rule, sample = case
    return f"{rule.id}:{sample[:40]}"


@pytest.mark.parametrize("case", _cases("tp"), ids=_id)
def test_rule_redacts_its_true_positive(case: tuple[Rule, str]) -> None:
    rule, sample = case
    text = sample.replace("«", "").replace("»", "")
    secrets = _MARKED.findall(sample)
    out = redact(text)
    assert out == _MARKED.sub(REDACTED, sample)
    assert all(secret not in out for secret in secrets)
    assert rule.id in {rule_id for rule_id, _s, _e in find_secrets(text, merge=False)}
    assert redact(out) == out, "redacting twice must change nothing"


_FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n" * 160  # > 8 kB


@pytest.mark.parametrize("case", _cases("tp"), ids=_id)
def test_rule_finds_its_true_positive_in_a_long_text(case: tuple[Rule, str]) -> None:
    # Long texts take the path that scans every rule; short ones check anchors first.
    _rule, sample = case
    text = sample.replace("«", "").replace("»", "")
    padded = f"{_FILLER}\n{text}\n\n{_FILLER}"
    assert redact(padded) == f"{_FILLER}\n{_MARKED.sub(REDACTED, sample)}\n\n{_FILLER}"


@pytest.mark.parametrize("case", _cases("fp"), ids=_id)
def test_rule_keeps_its_false_positive(case: tuple[Rule, str]) -> None:
    _rule, sample = case
    assert find_secrets(sample, merge=False) == []
    assert redact(sample) == sample


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.id)
def test_rule_is_documented_data_with_its_own_proof(rule: Rule) -> None:
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", rule.id)
    assert rule.label and rule.label == rule.label.strip() and len(rule.label) <= 40
    assert rule.description and rule.anchors
    assert all(anchor == anchor.lower() for anchor in rule.anchors)
    assert rule.true_positives, "a rule without a positive sample proves nothing"
    assert rule.false_positives, "every rule names a look-alike it must leave alone"
    for sample in rule.true_positives:
        assert _MARKED.search(sample), f"true positive without a «secret» mark: {sample!r}"


def test_rule_ids_are_unique() -> None:
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids))


def test_every_rule_is_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "redaction.md").read_text()
    missing = [rule.id for rule in RULES if f"| `{rule.id}` | {rule.label} |" not in docs]
    assert not missing, f"rules without a line in docs/redaction.md: {missing}"
