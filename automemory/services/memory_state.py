"""Auto memory's own state of a memory (`MemoryState`): the usage counters and the report
hold, moved in one statement each, the instruction flags of its text and their approval,
and read as a memory without a row reads them.

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
from django.utils import timezone

from automemory.models import (
    MEMORY_REVIEW_DEFAULTS,
    MEMORY_USAGE_DEFAULTS,
    MemorySourceTask,
    MemoryState,
    memory_awaiting_approval,
    memory_review,
)
from controlplane.models import IdentityMemory
from controlplane.rawsql import column, table
from controlplane.services.instructions import instruction_flags
from controlplane.services.memories import MemoryTextReview

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
    # The other counters start at zero and a new row has no flag (their columns have no
    # database default).
    for other, _ in COUNTERS.values():
        if other != counter:
            names.append(column(MemoryState, other))
            values.append("0")
    names += [column(MemoryState, "flagged"), column(MemoryState, "instruction_flags")]
    values += ["false", "CAST('[]' AS jsonb)" if connection.vendor == "postgresql" else "'[]'"]
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


def _state_forget(memory: IdentityMemory) -> None:
    """Drop the `MemoryState` read with `memory` (it was just written): the next read of
    one of its values reads the row again."""
    descriptor = IdentityMemory.auto_memory_state
    if descriptor.is_cached(memory):
        descriptor.related.delete_cached_value(memory)


def memory_report_hold_release(*, memory: IdentityMemory, user=None) -> datetime | None:
    """Release the report hold of `memory` (an owner approved it); when it was set, None if
    it was not held. Runs in the approval's transaction (the host's hold release)."""
    held = (
        MemoryState.objects.filter(memory_id=memory.pk, report_hold_at__isnull=False)
        .values_list("report_hold_at", flat=True)
        .first()
    )
    if held is not None:
        MemoryState.objects.filter(memory_id=memory.pk).update(report_hold_at=None)
        _state_forget(memory)
    return held


def memory_held_by_report(memory: IdentityMemory) -> bool:
    """Whether a report holds `memory` for review."""
    return _state_value(memory, name="report_hold_at") is not None


def memory_report_hold_audit(*, memory: IdentityMemory, released: bool) -> dict:
    """What an approval's audit event says of the report hold."""
    return {"report_hold_released": released}


def memory_awaiting_review(memory: IdentityMemory) -> bool:
    """Whether `memory`'s text is flagged as instruction-like and no owner approved it."""
    return memory_awaiting_approval(
        flagged=_state_value(memory, name="flagged"),
        approved_at=_state_value(memory, name="approved_at"),
    )


def memory_flag_approved(memory: IdentityMemory) -> bool:
    """Whether `memory`'s text is flagged and approved (approving it again changes nothing)."""
    return bool(_state_value(memory, name="flagged")) and not memory_awaiting_review(memory)


def memory_flag_approve(*, memory: IdentityMemory, user) -> None:
    """Approve `memory`'s flagged text as `user` (a project owner: the host's approval, in
    its transaction, the memory locked)."""
    MemoryState.objects.filter(memory_id=memory.pk, flagged=True).update(
        approved_at=timezone.now(), approved_by=user
    )
    _state_forget(memory)


def memory_flag_audit(*, memory: IdentityMemory, released: bool) -> dict:
    """What an approval's audit event says of the instruction flags: the text's flags."""
    return {"instruction_flags": list(_state_value(memory, name="instruction_flags") or [])}


def memory_held_for_review(memory: IdentityMemory) -> bool:
    """Held out of injection and search until a project owner reviews it: flagged and not
    approved, or reported."""
    return memory_awaiting_review(memory) or memory_held_by_report(memory)


def memory_flags_write(
    *, memory_id: int, text: str, approved_by=None, created: bool = False, flags=None
) -> list[str]:
    """Flag the memory's new `text`: its instruction flags, and no approval (new text needs
    a new one) unless `approved_by` approves it as its author. At most one statement: an
    upsert of the memory's row when the text is flagged, else the row's flags cleared (a
    memory without a row gets none; a `created` one has none). Returns the flags (`flags`:
    those of `text`, when the caller has them already)."""
    flags = instruction_flags(text) if flags is None else flags
    if not flags and created:
        return flags
    if not flags:
        MemoryState.objects.filter(memory_id=memory_id).update(
            **{name: MEMORY_REVIEW_DEFAULTS[name] for name in MEMORY_REVIEW_DEFAULTS}
        )
        return flags
    state = MemoryState(
        memory_id=memory_id,
        instruction_flags=flags,
        flagged=True,
        approved_at=timezone.now() if approved_by is not None else None,
        approved_by=approved_by,
    )
    MemoryState.objects.bulk_create(
        [state],
        update_conflicts=True,
        unique_fields=["memory"],
        update_fields=list(MEMORY_REVIEW_DEFAULTS),
    )
    return flags


def memory_text_review(
    *, memory: IdentityMemory, user, may_approve, created: bool
) -> MemoryTextReview:
    """The host's hook on a memory's new text (`memory_text_review_register`, in the write's
    transaction, the memory saved): its flags stored, approved by `user` when they may
    approve it anyway, else held for a project owner."""
    previous = {"instruction_flags": [], "approved_at": None}
    if not created:
        previous = (
            MemoryState.objects.filter(memory_id=memory.pk)
            .values("instruction_flags", "approved_at")
            .first()
            or previous
        )
    flags = instruction_flags(memory.content)
    approver = user if flags and may_approve() else None
    memory_flags_write(
        memory_id=memory.pk, text=memory.content, approved_by=approver, created=created, flags=flags
    )
    _state_forget(memory)
    audit = {"instruction_flags": flags, "awaiting_approval": bool(flags) and approver is None}
    if not created:
        audit = {
            "instruction_flags": flags,
            "previous_instruction_flags": list(previous["instruction_flags"] or []),
            "approval_cleared": previous["approved_at"] is not None,
            "awaiting_approval": audit["awaiting_approval"],
        }
    by_author = {"instruction_flags": flags} if flags and approver is not None else None
    return MemoryTextReview(audit=audit, approved_by_author=by_author)


def memory_row_extras() -> dict[str, dict]:
    """What the host's memory API shows of `MemoryState` (`memory_row_extra_register`):
    the counters and their times, since when a report holds the memory (None when none
    does), its source tasks (`source_task_ids`), and its instruction flags with their
    approval (`flagged`, `instruction_flags`, `approved_at`, `approved_by`), each as a
    list's annotation (a LEFT JOIN, so a memory without a row reads the defaults) and as a
    read of one memory."""
    extras = {}
    for name, default in MEMORY_USAGE_DEFAULTS.items():
        field = "held_for_review_since" if name == "report_hold_at" else name
        path = F(f"auto_memory_state__{name}")
        extras[field] = {
            "expression": Coalesce(path, Value(default)) if default is not None else path,
            "read": partial(_state_value, name=name),
        }
    extras["source_task_ids"] = {"expression": SourceTaskIds(), "read": memory_source_task_ids}
    review = memory_review()
    for name in ("flagged", "instruction_flags", "approved_at"):
        extras[name] = {"expression": review[name], "read": partial(_state_value, name=name)}
    extras["approved_by"] = {"expression": review["approved_by_name"], "read": _approver_name}
    return extras


def _approver_name(memory: IdentityMemory) -> str | None:
    """The username of who approved the memory's flagged text (None: nobody, or a removed
    account)."""
    if "approved_by_name" in memory.__dict__:
        return memory.__dict__["approved_by_name"]
    approver = memory_state(memory).approved_by
    return approver.get_username() if approver is not None else None


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
