"""The scanner: anchors located with ``str.find``, each rule's regex matched only there.

Ordinary text costs one ``lower()`` plus one ``find`` pass per distinct anchor.  Every
quantifier that may run long is possessive, and token rules start with a look-behind on
their own alphabet, so an anchor inside a run already rejected fails on its first
character; after a match, scanning resumes at the match end.  Work stays linear in the
input size whatever the input.
"""

from __future__ import annotations

import bisect
import re
from typing import cast

from automemory import metrics
from automemory.services.redactor.base import REDACTED, Rule, is_placeholder
from automemory.services.redactor.decoders import DECODERS
from automemory.services.redactor.rules import RULES

Finding = tuple[str, int, int]

_LABELS = {rule.id: rule.label for rule in RULES}
# anchor -> positions in RULES of the rules that use it (for the short-text path)
_RULES_BY_ANCHOR: dict[str, list[int]] = {}
for _index, _rule in enumerate(RULES):
    for _anchor in _rule.anchors:
        _RULES_BY_ANCHOR.setdefault(_anchor, []).append(_index)
# Below this length, checking which anchors occur at all first is cheaper than walking
# every rule (a memory or a log line is usually a few hundred characters).
_SHORT_TEXT = 8192


def _value_span(rule: Rule, m: re.Match[str]) -> tuple[int, int]:
    for group in rule.secret_groups:
        if m.start(group) != -1:
            return m.span(group)
    return m.span()


# Runs of token characters (the text is lowercased) that can hold a long provider token.
_TOKEN_RUN_RE = re.compile(r"[a-z0-9_.~+/=-]{16,}")


def _occurrences(lower: str, anchor: str) -> list[int]:
    out = []
    pos = lower.find(anchor)
    while pos != -1:
        out.append(pos)
        pos = lower.find(anchor, pos + 1)
    return out


def _run_occurrences(lower: str, anchor: str, memo: dict[str, object]) -> list[int]:
    """Occurrences of ``anchor`` inside runs of 16+ token characters only.

    The runs are joined once per scan (about a quarter of ordinary text), so each anchor of
    a long-token rule costs a ``find`` over that instead of the whole text.
    """
    runs = memo.get("runs")
    if runs is None:
        pieces, joined_starts, starts = [], [], []
        joined_len = 0
        for m in _TOKEN_RUN_RE.finditer(lower):
            start, end = m.span()
            pieces.append(lower[start:end])
            starts.append(start)
            joined_starts.append(joined_len)
            joined_len += end - start + 1
        runs = memo["runs"] = ("\0".join(pieces), joined_starts, starts)
    joined, joined_starts, starts = cast(tuple[str, list[int], list[int]], runs)
    out = []
    pos = joined.find(anchor)
    while pos != -1:
        k = bisect.bisect_right(joined_starts, pos) - 1
        out.append(starts[k] + pos - joined_starts[k])
        pos = joined.find(anchor, pos + 1)
    return out


def _scan_rule(
    rule: Rule,
    text: str,
    lower: str,
    seen: dict[str, list[int]],
    memo: dict[str, object],
    out: list[Finding],
) -> None:
    """Try ``rule`` at every occurrence of its anchors; append accepted spans to ``out``.

    ``seen`` caches each anchor's occurrences, so an anchor shared by several rules costs
    one pass over the text.
    """
    pattern = rule.pattern
    back = rule.backoff
    back_chars = rule.backoff_chars
    in_runs = rule.in_token_runs
    for anchor in rule.anchors:
        key = "\0" + anchor if in_runs else anchor
        positions = seen.get(key)
        if positions is None:
            positions = seen[key] = (
                _run_occurrences(lower, anchor, memo) if in_runs else _occurrences(lower, anchor)
            )
        resume = 0
        for pos in positions:
            if pos < resume:
                continue
            start = pos
            if back:  # the match may start before the anchor: back up (bounded)
                while start > pos - back and start > 0 and text[start - 1] in back_chars:
                    start -= 1
            m = pattern.match(text, start)
            if m is None:
                continue
            if rule.spans is not None:
                out.extend((rule.id, s, e) for s, e in rule.spans(m, text, memo) if e > s)
            else:
                s, e = _value_span(rule, m)
                value = text[s:e]
                if rule.id == "private-key":  # keep the newline after a truncated block
                    e = s + len(value.rstrip())
                if e > s and (
                    rule.validate(m, value, text)
                    if rule.validate is not None
                    else not is_placeholder(value)
                ):
                    out.append((rule.id, s, e))
            resume = max(m.end(), pos + 1)


def _lowered(text: str) -> str:
    lower = text.lower()
    if len(lower) != len(text):  # rare non-ASCII case mappings that change length
        lower = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return lower


def _scan(text: str) -> list[Finding]:
    """Every rule's findings in ``text`` as written (no decoding), unsorted."""
    lower = _lowered(text)
    found: list[Finding] = []
    seen: dict[str, list[int]] = {}
    memo: dict[str, object] = {}
    if len(text) <= _SHORT_TEXT:
        present = [anchor for anchor in _RULES_BY_ANCHOR if anchor in lower]
        if not present:
            return []
        rules = [RULES[i] for i in sorted({i for a in present for i in _RULES_BY_ANCHOR[a]})]
        for rule in rules:  # the rules' other anchors are absent: no pass for them
            for anchor in rule.anchors:
                if anchor not in present:
                    seen[anchor] = seen["\0" + anchor] = []
    else:
        rules = list(RULES)
    for rule in rules:
        _scan_rule(rule, text, lower, seen, memo, found)
    return found


def _scan_decoded(text: str) -> list[Finding]:
    """Findings in each decoder's view of ``text``, mapped back to the original spans.

    A view is scanned as written: what a decoder yields is never decoded again.
    """
    found: list[Finding] = []
    for decoder in DECODERS:
        view = decoder.view(text)
        if view is None:
            continue
        for rule_id, start, end in _scan(view.text):
            lo, hi = view.span(start, end)
            if hi > lo:
                found.append((rule_id, lo, hi))
    return found


def find_secrets(text: str, *, merge: bool = True) -> list[Finding]:
    """Return ``(rule_id, start, end)`` for each secret, sorted by position.

    The rules run over the text and over each decoder's view of it (full-width forms,
    invisible characters, percent-encoding, HTML entities, base64 text); a secret found
    in a view is reported at its span in ``text``.  Overlapping findings are merged into
    one span, named after the rule listed first in :data:`RULES` among those starting
    there, unless ``merge`` is false: then every rule's own finding is returned.
    """
    if not text:
        return []
    found = _scan(text)
    decoded = _scan_decoded(text)
    if decoded:
        found = list(dict.fromkeys(found + decoded))
    found.sort(key=lambda f: (f[1], -f[2]))
    if not merge:
        return found
    merged: list[Finding] = []
    for rule_id, start, end in found:
        if merged and start < merged[-1][2]:
            prev = merged[-1]
            if end > prev[2]:
                merged[-1] = (prev[0], prev[1], end)
            continue
        merged.append((rule_id, start, end))
    return merged


def secret_kinds(text: str) -> list[str]:
    """The labels of the secrets found in ``text`` ("GitHub token", "password assignment"),
    in order of first appearance, without the values.

    A manual memory is refused with these labels, never with the value.
    """
    return list(dict.fromkeys(_LABELS[rule_id] for rule_id, _s, _e in find_secrets(text)))


def redact(text: str) -> str:
    """Return ``text`` with every secret found replaced by :data:`REDACTED`."""
    if not text:
        return ""
    if not isinstance(text, str):
        text = str(text)
    spans = find_secrets(text)
    metrics.redaction_observe(rule_ids=[rule_id for rule_id, _s, _e in spans])
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for _rule_id, start, end in spans:
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    parts.append(text[last:])
    return "".join(parts)
