"""Injection: the first turn of a new task starts with memories before its prompt.

The worker calls `inject_memories()` after claiming a task and before executing it. Only the
in-memory prompt (and goal) the executor receives change; the stored task keeps the text the
user sent. Which memories go in is the user's `injection_ranking` (the selector ranks them),
how many is their `injection_max_chars` (`fit_memory_block`). Any failure is logged as a
warning and the task runs without memories.
"""

import logging
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from automemory import metrics, selectors
from automemory.models import AutoMemorySettings, TaskAutoMemoryFlags
from automemory.services.preferences import effective_switch
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
from controlplane.rawsql import Scalar, column, db_value, qn, table
from controlplane.services.audit import audit_record

logger = logging.getLogger(__name__)

__all__ = [
    "FOOTER",
    "HEADER",
    "FittedBlock",
    "InjectionPreferences",
    "InjectionResult",
    "fit_memory_block",
    "inject_memories",
    "preferences_from",
    "preferences_sql",
    "render_memory_block",
]


@dataclass(frozen=True)
class InjectionResult:
    """What the executor should run. `memory_ids` is empty when nothing was injected."""

    prompt: str
    goal: str | None
    memory_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class InjectionPreferences:
    """What decides a task's injection: `use_memories` (its flag, else its user's setting),
    and the user's ranking and size budget."""

    use_memories: bool
    ranking: str
    max_chars: int


def inject_memories(
    *,
    task: Task,
    prompt: str,
    goal: str | None,
    actor_label: str = "",
    preferences: InjectionPreferences | None = None,
) -> InjectionResult:
    """Return the in-memory prompt and goal with memories prepended; never raises (fail open).

    Nothing is injected on continuations, checkpoint resumes or coordinator tasks, when
    `use_memories` is off for the task (its flag, else the user's setting), or when there
    are no memories. The memories are chosen by the user's `injection_ranking` and fitted
    into `injection_max_chars`. On success, in one transaction: the task's
    `injected_memory_ids` is set, a `worker_memory_injected` audit event names the task, the
    memories and those left out for the budget, and the injected memories' usage counters
    move. `preferences` are the task's, when the caller already read them in its own
    statement (`preferences_sql`, the worker's claim); else they are read here.
    """
    unchanged = InjectionResult(prompt=prompt, goal=goal)
    try:
        if not _is_first_fresh_turn(task):
            return unchanged
        if preferences is None:
            preferences = _preferences(task)
        if not preferences.use_memories:
            return unchanged
        user_candidates, project_candidates = selectors.memories_for_injection(
            user_id=task.user_id,
            project_id=task.project_id,
            ranking=preferences.ranking,
            query_text=f"{goal or ''}\n{prompt}",
        )
        if not user_candidates and not project_candidates:
            return unchanged
        fitted = fit_memory_block(
            user_candidates, project_candidates, max_chars=preferences.max_chars
        )
        if not fitted.memory_ids:
            logger.info(
                "task %s gets no memories: none fits injection_max_chars=%s",
                task.pk,
                preferences.max_chars,
            )
            return unchanged
        _injection_record(task=task, fitted=fitted, actor_label=actor_label)
        task.injected_memory_ids = fitted.memory_ids
        metrics.injection_observe(
            user_memories=len(fitted.user_memories), project_memories=len(fitted.project_memories)
        )
        return InjectionResult(
            prompt=f"{fitted.block}\n\n{prompt}",
            goal=f"{fitted.block}\n\n{goal}" if goal else goal,
            memory_ids=fitted.memory_ids,
        )
    except Exception:
        logger.warning(
            "auto memory injection failed for task %s; it runs without memories",
            getattr(task, "pk", None),
            exc_info=True,
        )
        return unchanged


@dataclass(frozen=True)
class FittedBlock:
    """The block to prepend, the memories in it, and the candidates it had no room for."""

    block: str
    user_memories: list[IdentityMemory]
    project_memories: list[IdentityMemory]
    left_out_for_budget: list[int]

    @property
    def memory_ids(self) -> list[int]:
        return [m.pk for m in self.user_memories + self.project_memories]


def fit_memory_block(
    user_candidates: list[IdentityMemory],
    project_candidates: list[IdentityMemory],
    *,
    max_chars: int,
    nonce: str | None = None,
) -> FittedBlock:
    """The largest block within `max_chars` that takes the candidates in rank order.

    The budget covers the whole block (header, markers, labels, memories). Candidates are
    offered alternately by rank (user 1st, project 1st, user 2nd, ...) so neither scope
    starves the other; one that does not fit whole is skipped, never cut, and a later
    smaller one may still fit. When not even one fits, the block is empty.
    """
    nonce = nonce or fence_nonce()
    chosen: dict[str, list[IdentityMemory]] = {"user": [], "project": []}
    left_out: list[int] = []
    block = ""
    for scope, memory in _alternating(user_candidates, project_candidates):
        chosen[scope].append(memory)
        attempt = render_memory_block(chosen["user"], chosen["project"], nonce=nonce)
        if len(attempt) <= max_chars:
            block = attempt
        else:
            chosen[scope].pop()
            left_out.append(memory.pk)
    return FittedBlock(
        block=block,
        user_memories=chosen["user"],
        project_memories=chosen["project"],
        left_out_for_budget=left_out,
    )


def render_memory_block(
    user_memories: list[IdentityMemory],
    project_memories: list[IdentityMemory],
    *,
    nonce: str | None = None,
) -> str:
    """The header, the fenced memories (user ones first, one bullet each), the task heading.

    The fence's markers carry a random nonce the memories cannot know, and memory text is
    neutralised (no marker lines, no headings, no line of its own), so nothing inside can
    end the block early or pose as the task.
    """
    nonce = nonce or fence_nonce()
    lines = [HEADER, FENCE_NOTE, fence_begin(nonce)]
    for label, memories in (("About you", user_memories), ("About this project", project_memories)):
        if not memories:
            continue
        lines.append(f"{label}:")
        lines.extend(f"- {memory_text_fenced(memory.content)}" for memory in memories)
    lines.extend([fence_end(nonce), "", FOOTER])
    return "\n".join(lines)


def memory_text_fenced(content: str) -> str:
    """A memory's text as it sits in the block: inert, every line indented under its bullet.

    Any line break (CR, CRLF, form feed, Unicode line and paragraph separators...) becomes
    a newline followed by the indent, so no memory line can start a line of the block, and
    marker lines and headings are neutralised.
    """
    lines = content.strip().splitlines() or [""]
    return "\n  ".join(text_neutralised(line) for line in lines)


def _is_first_fresh_turn(task: Task) -> bool:
    return task.turn == 1 and not task.is_resume and task.kind != TaskKind.COORDINATOR


_SETTING_FIELDS = {
    "use_memories": "use_memories",
    "ranking": "injection_ranking",
    "max_chars": "injection_max_chars",
}


def preferences_sql(*, task_id_sql: str, user_id_sql: str) -> list[Scalar]:
    """The task's flag and its user's injection settings as scalar subqueries on the task id
    and user id columns of another statement (the worker folds them into its claim);
    `preferences_from` reads their values."""
    flags, settings_table = table(TaskAutoMemoryFlags), table(AutoMemorySettings)
    user_match = f"s.{column(AutoMemorySettings, 'user')} = {user_id_sql}"
    flag_field = TaskAutoMemoryFlags._meta.get_field("use_memories")
    scalars = [
        Scalar(
            "flag_use_memories",
            f"SELECT f.{qn(flag_field.column)} FROM {flags} f"
            f" WHERE f.{column(TaskAutoMemoryFlags, 'task')} = {task_id_sql}",
            field=flag_field,
        )
    ]
    for name, field_name in _SETTING_FIELDS.items():
        field = AutoMemorySettings._meta.get_field(field_name)
        scalars.append(
            Scalar(
                f"setting_{name}",
                f"SELECT s.{qn(field.column)} FROM {settings_table} s WHERE {user_match}",
                field=field,
            )
        )
    return scalars


def preferences_from(values: dict) -> InjectionPreferences:
    """The preferences from the values `preferences_sql` read (a user without settings has
    the defaults)."""
    defaults = AutoMemorySettings()

    def setting(name: str):
        value = values[f"setting_{name}"]
        return getattr(defaults, _SETTING_FIELDS[name]) if value is None else value

    return InjectionPreferences(
        use_memories=effective_switch(values["flag_use_memories"], setting("use_memories")),
        ranking=setting("ranking"),
        max_chars=setting("max_chars"),
    )


def _preferences(task: Task) -> InjectionPreferences:
    """The task's flag and its user's injection settings, read in one query."""
    scalars = preferences_sql(task_id_sql="t.id", user_id_sql="t.user_id")
    sql = (
        "SELECT " + ", ".join(f"({scalar.sql})" for scalar in scalars) + f" FROM {table(Task)} t"
        f" WHERE t.{column(Task, 'id')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [task.pk])
        row = cursor.fetchone()
    if row is None:
        return InjectionPreferences(
            use_memories=False, ranking=AutoMemorySettings().injection_ranking, max_chars=0
        )
    return preferences_from(
        {
            scalar.alias: db_value(scalar.field, value)
            for scalar, value in zip(scalars, row, strict=True)
        }
    )


def _injection_record(*, task: Task, fitted: FittedBlock, actor_label: str) -> None:
    """Write the task's injected ids, the audit event and the usage counters, atomically."""
    memory_ids = fitted.memory_ids
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
                "user_memory_ids": [m.pk for m in fitted.user_memories],
                "project_memory_ids": [m.pk for m in fitted.project_memories],
                "left_out_for_budget": fitted.left_out_for_budget,
                # Keyed shingle hashes, not text: extraction removes these memories from
                # the result even if they are edited or deleted before the sweep.
                "fingerprints": [
                    memory_fingerprint(m).as_snapshot()
                    for m in fitted.user_memories + fitted.project_memories
                ],
            },
        )
        # A plain UPDATE: `updated_at` (the memory's edit time) does not move.
        IdentityMemory.objects.filter(pk__in=memory_ids).update(
            injection_count=F("injection_count") + 1, last_injected_at=timezone.now()
        )


def _alternating(
    user_memories: list[IdentityMemory], project_memories: list[IdentityMemory]
) -> list[tuple[str, IdentityMemory]]:
    order = []
    for rank in range(max(len(user_memories), len(project_memories))):
        if rank < len(user_memories):
            order.append(("user", user_memories[rank]))
        if rank < len(project_memories):
            order.append(("project", project_memories[rank]))
    return order
