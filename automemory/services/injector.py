"""Injection: the first turn of a new task starts with the newest memories before its prompt."""

from dataclasses import dataclass, field

from controlplane.models import Task


@dataclass(frozen=True)
class InjectionResult:
    """What the executor should run. `memory_ids` is empty when nothing was injected."""

    prompt: str
    goal: str | None
    memory_ids: list[int] = field(default_factory=list)


def inject_memories(*, task: Task, prompt: str, goal: str | None, actor_label: str = "") -> InjectionResult:
    """Return the in-memory prompt and goal with memories prepended; never raises (fail open)."""
    raise NotImplementedError
