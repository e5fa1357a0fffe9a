"""A task's goal: its first line, and the key under which one memory per goal stays active."""

import hashlib
import re

from controlplane.models import Task

_WHITESPACE = re.compile(r"\s+")


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
