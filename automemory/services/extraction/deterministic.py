"""The deterministic strategy (no model): the goal line, then what the result adds.

`AUTOMEMORY_CONTENT_STRATEGY` names the callable `(task, *, injected) -> str` that writes a
memory's text when the user has no `extract_model`; this module's `memory_content` is the
default. `injected` are the fingerprints of the memories injected into the task: a strategy
that returns text taken from the task must remove them (`result_without_injected`) and
redact what it keeps, as this one does. An empty answer means there is nothing to remember.
"""

import re
from collections.abc import Callable, Sequence

from django.utils.module_loading import import_string

from automemory import conf
from automemory.services.provenance import Fingerprint, injected_text_removed
from automemory.services.redactor import redact, redacted_slice
from automemory.services.text import REDACTION_MARGIN_CHARS, cut, goal_line
from controlplane.models import Task

# A long result is cleaned of injected memories a prefix at a time, starting with this much.
_CLEAN_PREFIX_CHARS = 32768
_WORD = re.compile(r"\w+")
# Words a line may put before the goal and still only restate it ("Result for: <goal>").
_RESTATEMENT_PREFIX_WORDS = 3
# A line of only these words labels what follows ("## Task", "Goal:"): no content.
_LABEL_WORDS = frozenset({"task", "goal", "prompt", "result"})

ContentStrategy = Callable[..., str]


def content_strategy() -> ContentStrategy:
    """The configured `AUTOMEMORY_CONTENT_STRATEGY` callable (checked at start-up)."""
    return import_string(conf.get("CONTENT_STRATEGY"))


def render_memory_content(task: Task, *, injected: Sequence[Fingerprint] = ()) -> str:
    """The memory text for `task`, by the configured strategy."""
    return content_strategy()(task, injected=injected)


def memory_content(task: Task, *, injected: Sequence[Fingerprint] = ()) -> str:
    """The redacted goal line (capped), then what the result adds (its start, capped).

    The result's excerpt starts after its leading lines that only restate the goal (an echo
    of the prompt, `Result for: <goal>`), so the goal is said once. When the result adds
    nothing to the goal (an echo, "ok" to the task "ok") the answer is "": there is nothing
    to remember, and the sweep skips the task as `no_durable_signal`.
    """
    excerpt_chars = conf.get("RESULT_EXCERPT_CHARS")
    goal = goal_line(task)
    line = cut(redact(goal), conf.get("GOAL_LINE_MAX_CHARS"))
    result = result_without_injected(
        task, injected=injected, needed_chars=excerpt_chars + REDACTION_MARGIN_CHARS
    )
    window = redacted_slice(result, end=excerpt_chars * 2 + REDACTION_MARGIN_CHARS)
    excerpt = _without_goal_restatement(window, goal=goal)[:excerpt_chars].strip()
    if not _WORD.search(excerpt):
        return ""
    return f"{line}\n{excerpt}" if line else excerpt


def result_without_injected(
    task: Task, *, injected: Sequence[Fingerprint], needed_chars: int | None = None
) -> str:
    """The task's result without the memories injected into it, wherever the agent echoed them.

    Memories must not be remembered again, and a user's private memories must not reach the
    project. With `needed_chars`, only a growing prefix of a long result is cleaned, until at
    least that many characters remain (or the whole result was read).
    """
    text = task.result_text or ""
    size = len(text) if needed_chars is None else max(needed_chars * 2, _CLEAN_PREFIX_CHARS)
    while True:
        cleaned = injected_text_removed(text[:size], fingerprints=injected)
        if size >= len(text) or len(cleaned) >= needed_chars:
            return cleaned
        size *= 4


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
