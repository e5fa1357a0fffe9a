"""What an auto memory says and which goal it belongs to (the deterministic strategy, no model).

The model-based strategy is `automemory.services.model_extraction`; both hand the sweep a
`MemoryDraft`.
"""

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from django.utils.module_loading import import_string

from automemory import conf
from automemory.services.provenance import injected_text_removed, task_injected_fingerprints
from automemory.services.redactor import redact, secret_kinds
from controlplane.models import Task

_WHITESPACE = re.compile(r"\s+")
# Redact more than is kept, so a secret crossing the cut is still recognised whole.
_REDACTION_MARGIN_CHARS = 8192
# A long result is cleaned of injected memories a prefix at a time, starting with this much.
_CLEAN_PREFIX_CHARS = 32768


@dataclass(frozen=True)
class MemoryDraft:
    """What the sweep's content step hands to the writer: the memory's text and keywords.

    `content` is redacted and free of injected memories (still checked for private text
    before it is written); `keywords` come from the extraction model (empty from the
    deterministic strategy) and are stored on the memory; `note` is a line for the task's
    log detail (e.g. that the deterministic text was written because the model was away).
    """

    content: str
    keywords: list[str] = field(default_factory=list)
    note: str = ""


class NoDurableSignal(Exception):
    """The task holds nothing worth remembering (the model's judgement, or a result that
    adds nothing to the goal); the message says why, redacted."""


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


def content_strategy() -> Callable[[Task], str]:
    """The configured `AUTOMEMORY_CONTENT_STRATEGY` callable (checked at start-up)."""
    return import_string(conf.get("CONTENT_STRATEGY"))


def render_memory_content(task: Task) -> str:
    """The memory text for `task`, by the configured strategy."""
    return content_strategy()(task)


def memory_content(task: Task) -> str:
    """The deterministic strategy: the redacted goal line (capped), then what the result adds.

    The result's excerpt starts after its leading lines that only restate the goal (an echo
    of the prompt, `Result for: <goal>`), so the goal is said once. When the result adds
    nothing to the goal (an echo, "ok" to the task "ok") the answer is "": there is nothing
    to remember, and the sweep skips the task as `no_durable_signal`.

    A strategy that returns text taken from the task must redact it, as this one does, and
    remove what was injected into the task (`result_without_injected`).
    """
    line_cap = conf.get("GOAL_LINE_MAX_CHARS")
    excerpt_chars = conf.get("RESULT_EXCERPT_CHARS")
    goal = goal_line(task)
    line = redact(goal)
    if len(line) > line_cap:
        line = line[: line_cap - 1].rstrip() + "…"
    result = result_without_injected(task, needed_chars=excerpt_chars + _REDACTION_MARGIN_CHARS)
    window = result[: excerpt_chars * 2 + _REDACTION_MARGIN_CHARS]
    excerpt = _without_goal_restatement(redact(window), goal=goal)[:excerpt_chars].strip()
    if not _WORD.search(excerpt):
        return ""
    return f"{line}\n{excerpt}" if line else excerpt


_WORD = re.compile(r"\w+")
# Words a line may put before the goal and still only restate it ("Result for: <goal>").
_RESTATEMENT_PREFIX_WORDS = 3
# A line of only these words labels what follows ("## Task", "Goal:"): no content.
_LABEL_WORDS = frozenset({"task", "goal", "prompt", "result"})


def _without_goal_restatement(text: str, *, goal: str) -> str:
    """`text` without its leading lines that are blank, bare punctuation, a bare label
    ("## Task") or the goal again."""
    goal_words = [word.casefold() for word in _WORD.findall(goal)]
    lines = text.splitlines(keepends=True)
    start = 0
    for start, current in enumerate(lines):  # noqa: B007 (the index is the answer)
        words = [word.casefold() for word in _WORD.findall(current)]
        if not words:
            continue
        if set(words) <= _LABEL_WORDS or (goal_words and _restates(words, goal_words)):
            continue
        break
    else:
        return ""
    return "".join(lines[start:])


def _restates(words: list[str], goal_words: list[str]) -> bool:
    if words == goal_words:
        return True
    extra = len(words) - len(goal_words)
    return 0 < extra <= _RESTATEMENT_PREFIX_WORDS and words[extra:] == goal_words


def result_without_injected(task: Task, *, needed_chars: int | None = None) -> str:
    """The task's result without the memories injected into it, wherever the agent echoed them.

    Memories must not be remembered again, and a user's private memories must not reach the
    project. With `needed_chars`, only a growing prefix of a long result is cleaned, until at
    least that many characters remain (or the whole result was read).
    """
    text = task.result_text or ""
    fingerprints = task_injected_fingerprints(task)
    size = len(text) if needed_chars is None else max(needed_chars * 2, _CLEAN_PREFIX_CHARS)
    while True:
        cleaned = injected_text_removed(text[:size], fingerprints=fingerprints)
        if size >= len(text) or len(cleaned) >= needed_chars:
            return cleaned
        size *= 4


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
