"""Injection: the first turn of a new task starts with the newest memories before its prompt.

The worker calls `inject_memories()` after claiming a task and before executing it. Only the
in-memory prompt (and goal) the executor receives change; the stored task keeps the text the
user sent. Any failure is logged as a warning and the task runs without memories.
"""

import logging
from dataclasses import dataclass, field

from django.db import transaction

from automemory import metrics, selectors
from automemory.services.preferences import effective_switch, flags_get, settings_get
from automemory.services.provenance import (
    FENCE_NOTE,
    FOOTER,
    HEADER,
    INJECTED_EVENT,
    fence_begin,
    fence_end,
    fence_nonce,
    memory_fingerprint,
    text_neutralised,
)
from controlplane.models import IdentityMemory, Task, TaskKind
from controlplane.services.audit import audit_record

logger = logging.getLogger(__name__)

__all__ = ["FOOTER", "HEADER", "InjectionResult", "inject_memories", "render_memory_block"]


@dataclass(frozen=True)
class InjectionResult:
    """What the executor should run. `memory_ids` is empty when nothing was injected."""

    prompt: str
    goal: str | None
    memory_ids: list[int] = field(default_factory=list)


def inject_memories(
    *, task: Task, prompt: str, goal: str | None, actor_label: str = ""
) -> InjectionResult:
    """Return the in-memory prompt and goal with memories prepended; never raises (fail open).

    Nothing is injected on continuations, checkpoint resumes or coordinator tasks, when
    `use_memories` is off for the task (its flag, else the user's setting), or when there
    are no memories. On success the task's `injected_memory_ids` is set and a
    `worker_memory_injected` audit event names the task and the memories.
    """
    unchanged = InjectionResult(prompt=prompt, goal=goal)
    try:
        if not _is_first_fresh_turn(task) or not _use_memories(task):
            return unchanged
        user_memories, project_memories = selectors.memories_for_injection(
            user_id=task.user_id, project_id=task.project_id
        )
        memories = user_memories + project_memories
        if not memories:
            return unchanged
        block = render_memory_block(user_memories, project_memories)
        memory_ids = [memory.pk for memory in memories]
        with transaction.atomic():
            Task.objects.filter(pk=task.pk).update(injected_memory_ids=memory_ids)
            audit_record(
                action=INJECTED_EVENT,
                actor_label=actor_label,
                target_type="task",
                target_id=task.pk,
                data={
                    "task_id": task.pk,
                    "memory_ids": memory_ids,
                    "user_memory_ids": [m.pk for m in user_memories],
                    "project_memory_ids": [m.pk for m in project_memories],
                    # Keyed shingle hashes, not text: extraction removes these memories from
                    # the result even if they are edited or deleted before the sweep.
                    "fingerprints": [memory_fingerprint(m).as_snapshot() for m in memories],
                },
            )
        task.injected_memory_ids = memory_ids
        metrics.injection_observe(
            user_memories=len(user_memories), project_memories=len(project_memories)
        )
        return InjectionResult(
            prompt=f"{block}\n\n{prompt}",
            goal=f"{block}\n\n{goal}" if goal else goal,
            memory_ids=memory_ids,
        )
    except Exception:
        logger.warning(
            "auto memory injection failed for task %s; it runs without memories",
            getattr(task, "pk", None),
            exc_info=True,
        )
        return unchanged


def render_memory_block(
    user_memories: list[IdentityMemory],
    project_memories: list[IdentityMemory],
    *,
    nonce: str | None = None,
) -> str:
    """The header, the fenced memories (user ones first, one bullet each), the task heading.

    The fence's markers carry a random nonce the memories cannot know, and memory text is
    neutralised (no marker lines, no headings), so nothing inside can end the block early.
    """
    nonce = nonce or fence_nonce()
    lines = [HEADER, FENCE_NOTE, fence_begin(nonce)]
    for label, memories in (("About you", user_memories), ("About this project", project_memories)):
        if not memories:
            continue
        lines.append(f"{label}:")
        for memory in memories:
            text = text_neutralised(memory.content.strip()).replace("\n", "\n  ")
            lines.append(f"- {text}")
    lines.extend([fence_end(nonce), "", FOOTER])
    return "\n".join(lines)


def _is_first_fresh_turn(task: Task) -> bool:
    return task.turn == 1 and not task.is_resume and task.kind != TaskKind.COORDINATOR


def _use_memories(task: Task) -> bool:
    flags = flags_get(task_id=task.pk)
    return effective_switch(flags.use_memories, settings_get(user_id=task.user_id).use_memories)
