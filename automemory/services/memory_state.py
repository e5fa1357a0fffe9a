"""Auto memory's own state of a memory (`MemoryState`): the usage counters and the report
hold, moved in one statement each, and read as a memory without a row reads them.

A memory has a row once it was injected, cited or reported; the writers here insert it or
move it in one upsert (`INSERT ... SELECT ... ON CONFLICT DO UPDATE`), taking only memories
that still exist, so a memory deleted meanwhile is skipped as a plain update skipped it.
"""

import json
from collections.abc import Iterable
from datetime import datetime
from functools import partial

from django.db import connection
from django.db.models import F, JSONField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from automemory.models import MEMORY_USAGE_DEFAULTS, MemorySourceTask, MemoryState
from controlplane.models import IdentityMemory
from controlplane.rawsql import column, table

# The counter each event moves and the time it stamps.
COUNTERS = {
    "injected": ("injection_count", "last_injected_at"),
    "cited": ("cite_count", "last_cited_at"),
    "reported": ("report_count", "last_reported_at"),
}


def memory_state_count(
    *, memory_ids: Iterable[int], event: str, now: datetime, hold: bool = False
) -> None:
    """Count one more `event` (`injected`, `cited`, `reported`) for each of `memory_ids` at
    `now`, in one statement; `hold` also holds them for review since `now` (a report; a hold
    already set keeps its time)."""
    ids = list(dict.fromkeys(memory_ids))
    if not ids:
        return
    sql, params = memory_state_count_sql(memory_ids=ids, event=event, now=now, hold=hold)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def memory_state_count_sql(
    *, memory_ids: list[int], event: str, now: datetime, hold: bool = False
) -> tuple[str, list]:
    """The upsert of `memory_state_count` (not empty `memory_ids`), for a caller that adds
    to it (a `RETURNING`, a CTE)."""
    ids = memory_ids
    counter, stamp = COUNTERS[event]
    state = table(MemoryState)
    names = [
        column(MemoryState, "memory"),
        column(MemoryState, counter),
        column(MemoryState, stamp),
    ]
    values = ["m." + column(IdentityMemory, "id"), "1", "%s"]
    params: list = [connection.ops.adapt_datetimefield_value(now)]
    updates = [
        f"{names[1]} = {state}.{names[1]} + 1",
        f"{names[2]} = excluded.{names[2]}",
    ]
    if hold:
        hold_column = column(MemoryState, "report_hold_at")
        names.append(hold_column)
        values.append("%s")
        params.append(connection.ops.adapt_datetimefield_value(now))
        updates.append(f"{hold_column} = COALESCE({state}.{hold_column}, excluded.{hold_column})")
    # The other counters start at zero (their columns have no database default).
    for other, _ in COUNTERS.values():
        if other != counter:
            names.append(column(MemoryState, other))
            values.append("0")
    sql = (
        f"INSERT INTO {state} ({', '.join(names)})"
        f" SELECT {', '.join(values)} FROM {table(IdentityMemory)} m"
        f" WHERE m.{column(IdentityMemory, 'id')} IN ({', '.join(['%s'] * len(ids))})"
        f" ON CONFLICT ({names[0]}) DO UPDATE SET {', '.join(updates)}"
    )
    return sql, [*params, *ids]


def memory_state(memory: IdentityMemory) -> MemoryState:
    """The memory's `MemoryState`, or an unsaved one with the defaults when it has none (no
    query when it was read with the memory)."""
    try:
        return memory.auto_memory_state
    except MemoryState.DoesNotExist:
        return MemoryState(memory_id=memory.pk)


def memory_report_hold_release(*, memory: IdentityMemory) -> datetime | None:
    """Release the report hold of `memory` (an owner approved it); when it was set, None if
    it was not held. Runs in the approval's transaction (the host's approval hook)."""
    held = (
        MemoryState.objects.filter(memory_id=memory.pk, report_hold_at__isnull=False)
        .values_list("report_hold_at", flat=True)
        .first()
    )
    if held is not None:
        MemoryState.objects.filter(memory_id=memory.pk).update(report_hold_at=None)
    return held


def memory_held_by_report(memory: IdentityMemory) -> bool:
    """Whether a report holds `memory` for review."""
    return _state_value(memory, name="report_hold_at") is not None


def memory_held_for_review(memory: IdentityMemory) -> bool:
    """Held out of injection and search until a project owner reviews it: flagged and not
    approved, or reported."""
    return memory.awaiting_approval or memory_held_by_report(memory)


def memory_row_extras() -> dict[str, dict]:
    """What the host's memory API shows of `MemoryState` (`memory_row_extra_register`):
    the counters and their times, since when a report holds the memory (None when none
    does) and its source tasks (`source_task_ids`), each as a list's annotation (a LEFT
    JOIN, so a memory without a row reads the defaults) and as a read of one memory."""
    extras = {}
    for name, default in MEMORY_USAGE_DEFAULTS.items():
        field = "held_for_review_since" if name == "report_hold_at" else name
        path = F(f"auto_memory_state__{name}")
        extras[field] = {
            "expression": Coalesce(path, Value(default)) if default is not None else path,
            "read": partial(_state_value, name=name),
        }
    extras["source_task_ids"] = {"expression": SourceTaskIds(), "read": memory_source_task_ids}
    return extras


class SourceTaskIds(Subquery):
    """The ids of a memory's source tasks (`MemorySourceTask`), in the order they went in
    (created_at, id), read in the memory's own row: `ARRAY(...)` on PostgreSQL,
    `json_group_array` over the ordered subquery on SQLite. Always a list, empty for a
    memory without sources."""

    def __init__(self) -> None:
        links = MemorySourceTask.objects.filter(memory_id=OuterRef("pk")).order_by(
            "created_at", "id"
        )
        super().__init__(links.values(source_task_id=F("task_id")), output_field=JSONField())

    def as_sql(self, compiler, connection, template=None, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return f"(SELECT json_group_array(source_task_id) FROM {sql})", params

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return f"ARRAY{sql}", params

    def get_db_converters(self, connection):
        return [_id_list]


def _id_list(value, expression, connection) -> list[int]:
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)


def memory_source_task_ids(memory: IdentityMemory) -> list[int]:
    """The ids of the memory's source tasks, in the order they went in (as annotated by
    `SourceTaskIds`, else from its links, prefetched or read)."""
    ids = memory.__dict__.get("source_task_ids")
    return ids if ids is not None else [link.task_id for link in memory.source_links.all()]


def _state_value(memory: IdentityMemory, *, name: str):
    """`name` of the memory's `MemoryState`: as annotated on it (`memory_usage`), else from
    its row (no query when read with the memory)."""
    if name in memory.__dict__:
        return memory.__dict__[name]
    return getattr(memory_state(memory), name)
