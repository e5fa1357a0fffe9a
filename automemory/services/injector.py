"""Injection: the first turn of a new task starts with memories before its prompt.

The worker calls `inject_memories()` after claiming a task and before executing it. Only the
in-memory prompt (and goal) the executor receives change; the stored task keeps the text the
user sent. Which memories go in is the user's `injection_ranking` (`automemory.ranking`),
how many is their `injection_max_chars` (`memory_block.fit_memory_block`): together the
task's `InjectionPlan`. The preview (`memory_preview`) builds the same plan for a task not
created yet, and explains what it leaves out. Any failure of an injection is logged as a
warning and the task runs without memories.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from automemory import metrics, ranking
from automemory.models import (
    AutoMemorySettings,
    MemoryInjectionDay,
    MemoryState,
    TaskAutoMemoryFlags,
)
from automemory.services.citations import code_views
from automemory.services.citations import gate as citations
from automemory.services.citations.gate import CodeView
from automemory.services.memory_block import FittedBlock, fit_memory_block
from automemory.services.memory_state import memory_state_count, memory_state_count_sql
from automemory.services.preferences import effective_switch
from automemory.services.provenance import INJECTED_EVENT, memory_fingerprint
from automemory.services.task_keys import task_state_store
from controlplane.models import IdentityMemory, Membership, MemoryScope, Task, TaskKind
from controlplane.rawsql import Scalar, column, db_value, qn, table
from controlplane.services.audit import audit_record

logger = logging.getLogger(__name__)

# How many left-out memories of each scope a preview explains at most.
PREVIEW_LEFT_OUT_PER_SCOPE = 10


@dataclass(frozen=True)
class InjectionResult:
    """What the executor should run. `memory_ids` is empty when nothing was injected."""

    prompt: str
    goal: str | None
    memory_ids: list[int] = field(default_factory=list)
    # Whether the injection's transaction stored the `key_hash` it was given.
    key_stored: bool = False


@dataclass(frozen=True)
class InjectionQuery:
    """Whose first turn asks for memories, in which project, and with what prompt and goal."""

    user_id: int
    project_id: int
    prompt: str
    goal: str | None

    @property
    def text(self) -> str:
        """What the ranking matches memories against: the goal, then the prompt."""
        return f"{self.goal or ''}\n{self.prompt}"


@dataclass(frozen=True)
class InjectionPreferences:
    """What decides a task's injection: `use_memories` (its flag, else its user's setting),
    and the user's ranking and size budget."""

    use_memories: bool
    ranking: str
    max_chars: int
    # Off: the user's own memories only in projects where they are the only member.
    personal_in_shared: bool = True


def inject_memories(
    *,
    task: Task,
    prompt: str,
    goal: str | None,
    actor_label: str = "",
    preferences: InjectionPreferences | None = None,
    code: CodeView | None = None,
    key_hash: str = "",
) -> InjectionResult:
    """Return the in-memory prompt and goal with memories prepended; never raises (fail open).

    Nothing is injected on continuations, checkpoint resumes or coordinator tasks, when
    `use_memories` is off for the task (its flag, else the user's setting), or when there
    are no memories. The memories are chosen by the user's `injection_ranking` and fitted
    into `injection_max_chars`. On success, in one transaction: the task's
    `injected_memory_ids` is set, a `worker_memory_injected` audit event names the task, the
    memories and those left out for the budget, and the injected memories' usage counters
    move. `preferences` are the task's, when the caller already read them in its own
    statement (`preferences_sql`, the worker's claim); else they are read here. `code`:
    the code the task starts from (the worker's mirror and the task's base commit), which
    memories citing code are checked against (`automemory.services.citations`). `key_hash`:
    the turn's memory tool key hash when the claim could not store it (SQLite); stored with
    the injected ids (`key_stored`), so the row is written once.
    """
    unchanged = InjectionResult(prompt=prompt, goal=goal)
    try:
        if not _is_first_fresh_turn(task):
            return unchanged
        if preferences is None:
            preferences = _preferences(task)
        if not preferences.use_memories:
            return unchanged
        query = InjectionQuery(
            user_id=task.user_id, project_id=task.project_id, prompt=prompt, goal=goal
        )
        plan = injection_plan(query, preferences=preferences, code=code)
        fitted = plan.fitted
        if fitted is None:
            return unchanged
        if not fitted.memory_ids:
            logger.info(
                "task %s gets no memories: none fits injection_max_chars=%s",
                task.pk,
                preferences.max_chars,
            )
            return unchanged
        _injection_record(task=task, fitted=fitted, actor_label=actor_label, key_hash=key_hash)
        metrics.injection_observe(
            user_memories=len(fitted.user_memories), project_memories=len(fitted.project_memories)
        )
        return InjectionResult(
            prompt=f"{fitted.block}\n\n{prompt}",
            goal=f"{fitted.block}\n\n{goal}" if goal else goal,
            memory_ids=fitted.memory_ids,
            key_stored=bool(key_hash),
        )
    except Exception:
        logger.warning(
            "auto memory injection failed for task %s; it runs without memories",
            getattr(task, "pk", None),
            exc_info=True,
        )
        return unchanged


class LeftOutReason:
    BUDGET = "budget"
    RANKED_BELOW = "ranked_below"
    REPORTED = "reported"
    ARCHIVED = "archived"
    AWAITING_APPROVAL = "awaiting_approval"
    # The code a citation names changed or is gone (until the memory is revalidated).
    STALE_CODE = citations.STALE_CODE
    # Drawn on a branch not merged into the default branch, and the task is on another.
    OTHER_BRANCH = citations.OTHER_BRANCH


@dataclass(frozen=True)
class PlannedMemory:
    """A memory the plan offers the block: its scope, its rank in that scope (1 is best) and
    its ranking score (higher is better; None when it came in as one of the newest)."""

    memory: IdentityMemory
    scope: str
    rank: int
    score: float | None


@dataclass(frozen=True)
class LeftOut:
    """A memory a task would not receive, and why."""

    memory: IdentityMemory
    scope: str
    reason: str


@dataclass
class InjectionPlan:
    """What a task's first turn receives: the block (`fitted`, None when there was no
    candidate), the candidates in rank order, and, when explained, what was left out."""

    preferences: InjectionPreferences
    fitted: FittedBlock | None
    candidates: list[PlannedMemory] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    # Whether the user's own memories may go in (`personal_memories_in_shared_projects`).
    personal: bool = True

    @property
    def memory_ids(self) -> list[int]:
        return self.fitted.memory_ids if self.fitted is not None else []


def injection_plan(
    query: InjectionQuery,
    *,
    preferences: InjectionPreferences,
    explain: bool = False,
    code: CodeView | Callable[[], CodeView | None] | None = None,
) -> InjectionPlan:
    """The memories a first turn asking `query` receives, fitted into the block.

    The one path of injection and of the preview: the ranked candidates of each scope
    (`ranking.injection_candidates`), then the block that fits `injection_max_chars`.
    With `explain`, also what was left out and why: for the budget, ranked below a scope's
    limit, reported, archived or awaiting approval, read by the same one ranked query.
    Memories citing code are checked against `code` first (`citations.memories_gate`): a
    stale one (`stale_code`) or one of another branch (`other_branch`) is left out.
    """
    personal = personal_allowed(
        user_id=query.user_id, project_id=query.project_id, preferences=preferences
    )
    found = ranking.injection_candidates(
        user_id=query.user_id,
        project_id=query.project_id,
        ranking=preferences.ranking,
        query_text=query.text,
        personal=personal,
        explain=PREVIEW_LEFT_OUT_PER_SCOPE if explain else 0,
    )
    user_candidates = found.received[MemoryScope.USER]
    project_candidates = found.received[MemoryScope.PROJECT]
    gate = citations.memories_gate(user_candidates + project_candidates, code)
    gated = [
        LeftOut(memory, scope, gate.left_out[memory.pk])
        for scope, memories in (
            (MemoryScope.USER, user_candidates),
            (MemoryScope.PROJECT, project_candidates),
        )
        for memory in memories
        if memory.pk in gate.left_out
    ]
    user_candidates = gate.allowed(user_candidates)
    project_candidates = gate.allowed(project_candidates)
    candidates = [
        PlannedMemory(memory, scope, rank, _score(memory))
        for scope, memories in (
            (MemoryScope.USER, user_candidates),
            (MemoryScope.PROJECT, project_candidates),
        )
        for rank, memory in enumerate(memories, start=1)
    ]
    fitted = None
    if candidates:
        fitted = fit_memory_block(
            user_candidates, project_candidates, max_chars=preferences.max_chars
        )
    plan = InjectionPlan(
        preferences=preferences, fitted=fitted, candidates=candidates, personal=personal
    )
    if explain:
        plan.left_out = gated + _left_out(plan, found)
    return plan


def personal_allowed(*, user_id: int, project_id: int, preferences: InjectionPreferences) -> bool:
    """Whether a task of the user in the project may receive the user's own memories:
    always, unless `personal_memories_in_shared_projects` is off and others are members."""
    return preferences.personal_in_shared or not _shared(project_id, user_id=user_id)


def task_preferences(task: Task) -> InjectionPreferences:
    """The task's injection preferences: its flag, else its user's settings (one query)."""
    return _preferences(task)


def _shared(project_id: int, *, user_id: int) -> bool:
    """Whether the project has members other than the user (one query)."""
    return Membership.objects.filter(project_id=project_id).exclude(user_id=user_id).exists()


def _score(memory: IdentityMemory) -> float | None:
    score = getattr(memory, "match_score", None)
    return None if score is None else round(-float(score), 6)


def _left_out(plan: InjectionPlan, explained: ranking.InjectionCandidates) -> list[LeftOut]:
    """Why the memories a task would not receive are left out: the plan's candidates the
    budget had no room for, the receivable ones ranked below each scope's limit, and the
    best-ranked of those held or archived."""
    chosen = set(plan.memory_ids)
    left = [
        LeftOut(item.memory, item.scope, LeftOutReason.BUDGET)
        for item in plan.candidates
        if item.memory.pk not in chosen
    ]
    for scope, memories in explained.below.items():
        left += [LeftOut(m, scope, LeftOutReason.RANKED_BELOW) for m in memories]
    for scope, memories in explained.withheld.items():
        left += [LeftOut(m, scope, _withheld_reason(m)) for m in memories]
    return left


def _withheld_reason(memory: IdentityMemory) -> str:
    if memory.status == "archived":
        return LeftOutReason.ARCHIVED
    if getattr(memory, "report_hold_at", None) is not None:  # read by the ranking's query
        return LeftOutReason.REPORTED
    return LeftOutReason.AWAITING_APPROVAL


def user_preferences(*, user_id: int) -> InjectionPreferences:
    """What a new task of the user would get (no task flag yet): the user's settings."""
    row = AutoMemorySettings.objects.filter(user_id=user_id).first() or AutoMemorySettings()
    return InjectionPreferences(
        use_memories=row.use_memories,
        ranking=row.injection_ranking,
        max_chars=row.injection_max_chars,
        personal_in_shared=row.personal_memories_in_shared_projects,
    )


def memory_preview(
    *, user, project_id: int, prompt: str, goal: str | None, branch: str | None = None
) -> InjectionPlan:
    """What a new task with this prompt and goal, created by `user` in the project now on
    `branch` (the repository's default when None), would receive, with what is left out and
    why: `injection_plan` as injection runs it, explained, memories citing code checked
    against that branch's head now. Nothing when the user's `use_memories` is off. It writes
    nothing but what a citation check found. The caller has checked the user is a member."""
    preferences = user_preferences(user_id=user.pk)
    if not preferences.use_memories:
        return InjectionPlan(preferences=preferences, fitted=None)
    query = InjectionQuery(user_id=user.pk, project_id=project_id, prompt=prompt, goal=goal)
    return injection_plan(
        query,
        preferences=preferences,
        explain=True,
        code=lambda: code_views.view_for_branch(project_id, branch),
    )


def _is_first_fresh_turn(task: Task) -> bool:
    return task.turn == 1 and not task.is_resume and task.kind != TaskKind.COORDINATOR


_SETTING_FIELDS = {
    "use_memories": "use_memories",
    "ranking": "injection_ranking",
    "max_chars": "injection_max_chars",
    "personal_in_shared": "personal_memories_in_shared_projects",
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
        personal_in_shared=setting("personal_in_shared"),
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


def _injection_record(
    *, task: Task, fitted: FittedBlock, actor_label: str, key_hash: str = ""
) -> None:
    """Write the task's injected ids (and `key_hash`, given), the audit event and the usage
    counters, atomically."""
    memory_ids = fitted.memory_ids
    with transaction.atomic():
        task_state_store(
            task_id=task.pk,
            key_hash=key_hash or None,
            claimed_at=task.claimed_at,
            injected_memory_ids=memory_ids,
        )
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
        injections_count(memory_ids=memory_ids, now=timezone.now())


def injections_count(*, memory_ids: list[int], now: datetime) -> None:
    """Count one more task that received each of `memory_ids` at `now`: the memories'
    `injection_count` and `last_injected_at` (auto memory's `MemoryState` row), and the count
    of their day (the server's local date) that the memory-health page sums. One statement:
    on PostgreSQL the row's upsert and the day's in one; on SQLite the row's upsert, whose
    triggers count the day (automemory/migrations/0021). The memory's edit time
    (`updated_at`) does not move."""
    distinct = list(dict.fromkeys(memory_ids))
    if not distinct:
        return
    if connection.vendor != "postgresql":
        memory_state_count(memory_ids=distinct, event="injected", now=now)
        return
    counted, params = memory_state_count_sql(memory_ids=distinct, event="injected", now=now)
    days = table(MemoryInjectionDay)
    sql = (
        f"WITH counted AS ({counted} RETURNING {column(MemoryState, 'memory')} AS memory_id)"
        f" INSERT INTO {days} (memory_id, day, tasks) SELECT memory_id, %s, 1 FROM counted"
        f" ON CONFLICT (memory_id, day) DO UPDATE SET tasks = {days}.tasks + 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, timezone.localdate(now)])
