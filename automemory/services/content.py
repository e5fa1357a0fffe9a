"""What an auto memory says and which goal it belongs to (deterministic v1, no model call)."""

import hashlib
import re
from collections.abc import Callable

from django.utils.module_loading import import_string

from automemory import conf
from automemory.services.injector import FOOTER, HEADER
from automemory.services.redactor import redact
from controlplane.models import Task

_WHITESPACE = re.compile(r"\s+")
# Redact more than is kept, so a secret crossing the cut is still recognised whole.
_REDACTION_MARGIN_CHARS = 8192


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
    """The deterministic v1 strategy: the redacted goal line (capped) and result excerpt.

    A strategy that returns text taken from the task must redact it, as this one does.
    """
    line_cap = conf.get("GOAL_LINE_MAX_CHARS")
    excerpt_chars = conf.get("RESULT_EXCERPT_CHARS")
    line = redact(goal_line(task))
    if len(line) > line_cap:
        line = line[: line_cap - 1].rstrip() + "…"
    result = without_injected_block(task.result_text or "")
    window = result[: excerpt_chars + _REDACTION_MARGIN_CHARS]
    excerpt = redact(window)[:excerpt_chars].strip()
    return f"{line}\n{excerpt}" if excerpt else line


def without_injected_block(text: str) -> str:
    """`text` without a leading block of injected memories (an agent that echoed its prompt).

    Memories must not be remembered again as part of a later task's result.
    """
    if not text.startswith(HEADER):
        return text
    end = text.find(f"\n{FOOTER}\n", len(HEADER))
    if end == -1:
        return text
    return text[end + len(FOOTER) + 2 :].lstrip("\n")
