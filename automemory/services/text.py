"""Memory text: the one place that cleans what a memory says and the keywords it is found by,
and that says a task's goal line (its first line) and goal key (under which one memory per
goal stays active).

Every text that becomes a memory (a model's answer, a consolidation's merged text) is cut to
`AUTOMEMORY_MEMORY_MAX_CHARS`, cleaned of the memories injected into its task, and redacted;
keywords are short single lines, redacted, distinct, and never a redaction marker. A
hand-written memory is refused when it holds a secret (`manual_memory_secret_problem`).
What the extraction model is shown of a task is cleaned the same way, a part at a time
(`excerpt_clean`, `head_and_tail_clean`, `line_clean`).
"""

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from automemory import conf
from automemory.services.provenance import Fingerprint, injected_text_removed
from automemory.services.redactor import (
    REDACTED,
    marker_safe_end,
    redact,
    redacted_slice,
    secret_kinds,
)
from controlplane.models import Task

# Redact more than is kept, so a secret crossing a cut is still recognised whole.
REDACTION_MARGIN_CHARS = 8192
MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 60
_WHITESPACE = re.compile(r"\s+")
# A keyword holding this (the redaction marker, bracketed or not) is dropped.
REDACTED_WORD = REDACTED.strip("[]")


def goal_line(task: Task) -> str:
    """The first non-blank line of the goal, else of the prompt, whitespace-collapsed."""
    for source in (task.goal, task.prompt):
        for line in (source or "").splitlines():
            collapsed = _WHITESPACE.sub(" ", line).strip()
            if collapsed:
                return collapsed
    return ""


def goal_key(task: Task) -> str:
    """The identity of a task's goal: its first line trimmed, space-collapsed and case-folded.

    Hashed so the key has a fixed size for the unique index whatever the line's length.
    """
    return hashlib.sha256(goal_line(task).casefold().encode("utf-8")).hexdigest()


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit - 1` characters and an ellipsis when it is longer."""
    if len(text) <= limit:
        return text
    return text[: marker_safe_end(text, limit - 1)].rstrip() + "…"


def one_line(text: str, limit: int) -> str:
    """`text` on one line (white space collapsed), cut to `limit`."""
    return cut(_WHITESPACE.sub(" ", text).strip(), limit)


def excerpt_clean(text: str, limit: int, *, fingerprints: Sequence[Fingerprint] = ()) -> str:
    """The start of `text`, cleaned of injected memories, redacted, then cut to `limit`."""
    window = injected_text_removed(
        (text or "")[: limit + 2 * REDACTION_MARGIN_CHARS], fingerprints=fingerprints
    )
    return cut(redacted_slice(window, end=limit + REDACTION_MARGIN_CHARS), limit)


def head_and_tail_clean(text: str, limit: int, *, fingerprints: Sequence[Fingerprint] = ()) -> str:
    """`text` without injected memories, redacted; a long one keeps its first third and its
    last two thirds of `limit` (the end of a result usually says what was learned)."""
    text = injected_text_removed(text or "", fingerprints=fingerprints)
    if len(text) <= limit:
        return redact(text)
    head_chars = limit // 3
    tail_chars = limit - head_chars
    # Redacted first, then cut: a secret crossing either cut is left out whole.
    head = redacted_slice(text, end=head_chars)
    tail = redacted_slice(text, start=len(text) - tail_chars)
    left_out = len(text) - head_chars - tail_chars
    return f"{head}\n[… {left_out} characters left out …]\n{tail}"


def line_clean(text: str, limit: int, *, fingerprints: Sequence[Fingerprint] = ()) -> str:
    """The start of `text` on one line, cleaned of injected memories and redacted (reading
    up to 20 times `limit`), cut to `limit`."""
    window = injected_text_removed(
        text[: limit * 20 + REDACTION_MARGIN_CHARS], fingerprints=fingerprints
    )
    return one_line(redacted_slice(window, end=limit * 20), limit)


def memory_text_clean(text: str, *, fingerprints: Sequence[Fingerprint] = ()) -> str:
    """A memory's text from a model: injected memories removed, redacted, trimmed, capped."""
    cap = conf.get("MEMORY_MAX_CHARS")
    window = text[: cap + 2 * REDACTION_MARGIN_CHARS]
    if fingerprints:
        window = injected_text_removed(window, fingerprints=fingerprints)
    # Redacted first, then cut: a secret crossing the window's cut is left out whole.
    return cut(redacted_slice(window, end=cap + REDACTION_MARGIN_CHARS).strip(), cap).strip()


def keywords_clean(values: Iterable[Any], *, limit: int = MAX_KEYWORDS) -> list[str]:
    """Distinct (case-insensitively), redacted, one-line keyword strings, at most `limit`.

    A keyword that held a secret is dropped, never kept as a redaction marker.
    """
    kept: dict[str, str] = {}
    for value in values or ():
        if not isinstance(value, str):
            continue
        keyword = one_line(redacted_slice(value, end=MAX_KEYWORD_CHARS * 4), MAX_KEYWORD_CHARS)
        if keyword and REDACTED_WORD not in keyword.upper():
            kept.setdefault(keyword.casefold(), keyword)
        if len(kept) >= limit:
            break
    return list(kept.values())


def manual_memory_secret_problem(content: str) -> str | None:
    """Why a hand-written memory may not be stored: the kinds of secret it holds, never the
    values (memories are injected into every later task). None when it holds none."""
    kinds = secret_kinds(content)
    if not kinds:
        return None
    return (
        f"Memory content holds a secret ({', '.join(dict.fromkeys(kinds))}). "
        "Remove it (refer to where it is kept instead) and save again."
    )
