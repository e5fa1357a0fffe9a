"""An auto memory's goal (`MemoryGoal`): stored with the memory by the writer, read by the
same-goal rules, and kept in step with the host's row by the triggers of `automemory/0027`.
"""

import importlib

from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

from automemory.models import MemoryGoal
from controlplane.models import IdentityMemory, MemorySource

TRIGGERS = "automemory.migrations.0027_memory_goals_follow_the_memory"
# Every goal's copies taken afresh from its memory (what the trigger does row by row).
_COPIES_REFRESH = (
    "UPDATE automemory_memory_goals SET project_id = m.project_id,"
    " author_id = m.created_by_id, visibility = m.visibility,"
    " active = (m.source = 'auto' AND m.status = 'active')"
    " FROM identity_memories m WHERE m.id = automemory_memory_goals.memory_id"
)


def memory_goal_store(memory: IdentityMemory, *, goal_key: str, source_finished_at) -> MemoryGoal:
    """Store the goal of `memory` (just saved, in the writer's transaction): one insert. The
    copies it takes from the memory make the one-active-per-goal constraints hold or raise
    IntegrityError here."""
    goal = MemoryGoal.of(memory, goal_key=goal_key, source_finished_at=source_finished_at)
    goal.save(force_insert=True)
    return goal


def memory_goal(memory: IdentityMemory) -> MemoryGoal | None:
    """The goal row of `memory` (no query when it was read with the memory), None without."""
    try:
        return memory.auto_memory_goal
    except MemoryGoal.DoesNotExist:
        return None


def goal_key_of(memory: IdentityMemory) -> str:
    goal = memory_goal(memory)
    return goal.goal_key if goal is not None else ""


def source_finished_at_of(memory: IdentityMemory):
    goal = memory_goal(memory)
    return goal.source_finished_at if goal is not None else None


def memory_restore_problem(memory: IdentityMemory) -> str | None:
    """Why `memory` may not be restored now (the host's restore check): its goal has another
    active auto memory (one goal keeps one; forget or edit that one first). None when it may."""
    goal = memory_goal(memory)
    if memory.source != MemorySource.AUTO or goal is None:
        return None
    current = (
        MemoryGoal.objects.filter(project_id=goal.project_id, goal_key=goal.goal_key, active=True)
        .exclude(memory_id=memory.pk)
        .values_list("memory_id", flat=True)
        .first()
    )
    if current is None:
        return None
    return (
        f"The same goal has an active auto memory now (memory {current}); forget it before "
        "restoring this one."
    )


def goal_triggers_drop(*, using: str = "default", **_kwargs) -> None:
    """Drop the SQLite trigger that keeps the goals' copies in step before `migrate` runs
    (pre_migrate); `goal_triggers_ensure` puts it back after.

    The trigger is on the host's memory table and names `automemory_memory_goals`: SQLite
    re-reads every trigger when a migration rebuilds a table (copy, drop, rename), and one
    naming the dropped table fails the rename, so neither table could be rebuilt under it.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    triggers = importlib.import_module(TRIGGERS)
    with connection.cursor() as cursor:
        for statement in triggers.DROP["sqlite"]:
            cursor.execute(statement)


def goal_triggers_ensure(*, using: str = "default", **_kwargs) -> None:
    """Recreate the SQLite trigger that keeps the goals' copies in step if it is missing
    (after every `migrate`, post_migrate: `goal_triggers_drop` dropped it, or a table rebuild
    did) and bring the copies up to date; PostgreSQL keeps its triggers."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    applied = MigrationRecorder(connection).applied_migrations()
    if ("automemory", TRIGGERS.rpartition(".")[2]) not in applied:
        return  # not migrated this far: the migration creates it
    triggers = importlib.import_module(TRIGGERS)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE (type = 'table' AND name IN"
            " ('identity_memories', 'automemory_memory_goals'))"
            " OR (type = 'trigger' AND name = %s)",
            [triggers.TRIGGER],
        )
        found = {row[0] for row in cursor.fetchall()}
        if {
            "identity_memories",
            "automemory_memory_goals",
        } <= found and triggers.TRIGGER not in found:
            # What a migration changed while the trigger was away.
            cursor.execute(_COPIES_REFRESH)
            cursor.execute(triggers.SQLITE_CREATE)
