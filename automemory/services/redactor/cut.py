"""Redact first, cut after: a piece of a long text, redacted, without part of a secret.

Cutting a text before redacting it can split a secret so that its first characters no
longer look like one (`sk_live_` and 15 characters is not a Stripe key to any rule) and are
kept; later cuts of the redacted text (white space collapsed, a length limit) then bring
them into what is stored or shown. `redacted_slice` reads past each cut, finds the secrets
there, and moves a cut that falls inside one to its edge, so the secret is left out whole.
`marker_safe_end` keeps a cut of redacted text from splitting a `[REDACTED]` marker.
"""

from automemory import metrics
from automemory.services.redactor.base import REDACTED
from automemory.services.redactor.engine import find_secrets

# How far past each cut the rules read: a secret crossing a cut and shorter than this is
# found whole (PEM keys, the longest secrets the rules know, are a few thousand characters).
SCAN_MARGIN_CHARS = 8192


def redacted_slice(
    text: str, *, start: int = 0, end: int | None = None, margin: int = SCAN_MARGIN_CHARS
) -> str:
    """`text[start:end]` with every secret replaced by `[REDACTED]`; a secret that crosses
    `start` or `end` is left out whole (the piece ends before it, or starts after it).

    Only `margin` characters either side of the piece are read, so a long text costs what
    its piece costs. Without `start` and `end` it is `redact(text)`.
    """
    if not text:
        return ""
    if not isinstance(text, str):
        text = str(text)
    size = len(text)
    end = size if end is None else max(0, min(end, size))
    start = max(0, min(start, end))
    low, high = max(0, start - margin), min(size, end + margin)
    spans = [(low + s, low + e, rule) for rule, s, e in find_secrets(text[low:high])]
    for s, e, _rule in spans:
        if s < start < e:
            start = e
    for s, e, _rule in spans:
        if s < end < e:
            end = s
    if start >= end:
        return ""
    kept = [(s, e, rule) for s, e, rule in spans if s < end and e > start]
    metrics.redaction_observe(rule_ids=[rule for _s, _e, rule in kept])
    parts, last = [], start
    for s, e, _rule in kept:
        parts.append(text[last:s])
        parts.append(REDACTED)
        last = e
    parts.append(text[last:end])
    return "".join(parts)


def marker_safe_end(text: str, end: int) -> int:
    """`end`, or the start of the `[REDACTED]` marker it would split: cut redacted text at
    the position returned."""
    first = max(0, end - len(REDACTED) + 1)
    at = text.find(REDACTED, first, end + len(REDACTED) - 1)
    return at if -1 < at < end < at + len(REDACTED) else end
