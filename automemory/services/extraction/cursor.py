"""Where a sweep left off: the (updated_at, id) of the last completed task it examined.

Each sweep reads only completed tasks changed since its cursor, so its cost grows with the
work pending, not with the history. The cursor lives on the sweep's `SweepState` row, next
to its lease, and moves only under that lease: a sweeper that lost its lease cannot move it.
"""

import uuid
from datetime import datetime, timedelta

from django.db.models import (
    BigIntegerField,
    Case,
    DateTimeField,
    F,
    Q,
    QuerySet,
    Value,
    When,
)
from django.utils import timezone

from automemory.models import SweepState
from controlplane.models import Task

# Transactions that committed late may carry an `updated_at` a little behind the cursor;
# the cursor never advances past `now - this`, so such tasks are still seen next round.
CURSOR_SAFETY_MARGIN = timedelta(seconds=30)

Point = tuple[datetime, int]


def cursor_read(states: list[SweepState]) -> Point | None:
    """The furthest cursor among `states` (each sweep has seen everything before its own)."""
    points = [
        (state.cursor_updated_at, state.cursor_task_id)
        for state in states
        if state.cursor_updated_at is not None
    ]
    return max(points, default=None)


def changed_since(completed: QuerySet[Task], after: Point | None, *, limit: int) -> list[Point]:
    """The (updated_at, id) of at most `limit` tasks of `completed` changed after `after`, in
    that order (a range scan of the `(.., updated_at, id)` index)."""
    if after is not None:
        updated_at, task_id = after
        # The first term bounds the index scan on every database.
        completed = completed.filter(
            Q(updated_at__gte=updated_at)
            & (Q(updated_at__gt=updated_at) | Q(updated_at=updated_at, id__gt=task_id))
        )
    return list(completed.order_by("updated_at", "id").values_list("updated_at", "id")[:limit])


def cursor_advance(
    name: str,
    *,
    token: uuid.UUID,
    read_at: datetime,
    stopped_at: Point | None,
    hold: Point | None,
) -> bool:
    """Move the cursor of `name` past what the sweep's read covered; stamp `last_sweep_at`.

    The read covered every task up to `read_at - margin` (those it did not return were
    extracted, unchanged stable skips or the retry set's: a change bumps them past the
    cursor), or, when it stopped at its limit, up to `stopped_at`. It never passes `hold`
    (just before the first task of the read left for a later sweep), and never moves back.
    One statement, conditional on the lease token: False when this sweeper no longer holds
    the lease.
    """
    point = (read_at - CURSOR_SAFETY_MARGIN, 0)
    if stopped_at is not None:
        point = min(point, stopped_at)
    if hold is not None:
        point = min(point, hold)
    updated_at, task_id = point
    behind = (
        Q(cursor_updated_at__isnull=True)
        | Q(cursor_updated_at__lt=updated_at)
        | Q(cursor_updated_at=updated_at, cursor_task_id__lt=task_id)
    )
    # Never back: a cursor set further by hand (or by a holder whose read covered more)
    # stays where it is.
    moved = SweepState.objects.filter(name=name, lease_token=token).update(
        cursor_updated_at=Case(
            When(behind, then=Value(updated_at, output_field=DateTimeField())),
            default=F("cursor_updated_at"),
        ),
        cursor_task_id=Case(
            When(behind, then=Value(task_id, output_field=BigIntegerField())),
            default=F("cursor_task_id"),
        ),
        last_sweep_at=timezone.now(),
    )
    return moved == 1
