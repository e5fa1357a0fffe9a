"""The worker's two hot statements in raw SQL: the claim, and (on PostgreSQL) the finish.

A claimed task costs a claim and a finish, as in the procrastinate / solid_queue class of
queues. Django 5.2 cannot write either as one statement (no RETURNING for updates, no
data-modifying CTEs), so they are written here, one small function each, with every table
and column name taken from the models:

- `claim_sql`: one `UPDATE ... RETURNING` on every database. The oldest queued task is
  picked by a subquery (`FOR UPDATE SKIP LOCKED` where the database has it, so concurrent
  workers never wait for each other; SQLite serialises writers itself) and set running;
  the row comes back with the scalars the caller folds in (the quota, the injection
  preferences), so none of them costs a statement of its own. On PostgreSQL the update is
  a CTE beside which the turn's memory tool key is stored (`key_store`).
- `finish_sql_postgresql`: the task's result, its run in the run history, its ledger row,
  the user's monthly total and the executor's events, in one statement of data-modifying
  CTEs. SQLite cannot write several tables in one statement; there the finish is a short
  transaction of ORM and raw writes (`worker.services.task_finish`).

Both are conditional on the task's state, and the finish on the claim's fence
(`worker_id`, `claimed_at`): a worker that lost its task writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection

from controlplane.models import Task, TaskDiff, TaskEvent, TaskStatus
from controlplane.rawsql import Scalar, column, qn, select_list, table
from controlplane.services.usage import usage_ctes_postgresql
from worker.models import TaskRun


def _dt(value: datetime | None):
    return connection.ops.adapt_datetimefield_value(value)


def claim_sql(
    *,
    worker_id: str,
    executor: str,
    queued_before: datetime | None,
    now: datetime,
    scalars: Sequence[Scalar],
    key_store: Callable[[str], tuple[str, list]] | None = None,
) -> tuple[str, list]:
    """The claim of the oldest queued task for `worker_id`: one statement, returning the
    task's row (every concrete field) and then `scalars`, whose SQL may use the task's
    columns qualified by its table name. `key_store` (PostgreSQL): given the name of the
    claimed row's CTE, the body of a data-modifying CTE that stores the turn's memory
    tool key in the same statement."""
    task = table(Task)
    col = {name: column(Task, name) for name in ("id", "status", "queued_at", "started_at")}
    sets = [
        f"{col['status']} = '{TaskStatus.RUNNING}'",
        f"{column(Task, 'worker_id')} = %s",
        f"{column(Task, 'claimed_at')} = %s",
        f"{column(Task, 'heartbeat_at')} = %s",
        f"{column(Task, 'finished_at')} = NULL",
        f"{column(Task, 'failure_reason')} = ''",
        f"{column(Task, 'updated_at')} = %s",
        # A checkpoint resume keeps the time its turn first started.
        f"{col['started_at']} = CASE WHEN {column(Task, 'is_resume')}"
        f" AND {col['started_at']} IS NOT NULL THEN {col['started_at']} ELSE %s END",
    ]
    params: list = [worker_id, _dt(now), _dt(now), _dt(now), _dt(now)]
    if executor:
        sets.append(f"{column(Task, 'executor')} = %s")
        params.append(executor)
    # The literal status matches the partial index task_queue_idx (SQLite needs the constant).
    queued = f"{col['status']} = '{TaskStatus.QUEUED}'"
    pick_where = queued
    pick_params: list = []
    if queued_before is not None:
        pick_where += f" AND ({col['queued_at']} <= %s OR {col['queued_at']} IS NULL)"
        pick_params.append(_dt(queued_before))
    lock = (
        " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    )
    pick = (
        f"SELECT {col['id']} FROM {task} WHERE {pick_where}"
        f" ORDER BY {col['queued_at']}, {col['id']} LIMIT 1{lock}"
    )
    returning, returning_params = select_list(Task, task, scalars=scalars)
    sql = (
        f"UPDATE {task} SET {', '.join(sets)}"
        f" WHERE {col['id']} = ({pick}) AND {queued} RETURNING {returning}"
    )
    params = [*params, *pick_params, *returning_params]
    if key_store is None:
        return sql, params
    store, store_params = key_store("claimed")
    return f"WITH claimed AS ({sql}), key AS ({store}) SELECT * FROM claimed", [
        *params,
        *store_params,
    ]


FINISH_RETURNS = ("user_id", "task_id", "project_id", "turn", "thread_id", "executor")


@dataclass(frozen=True)
class TurnFinish:
    """What ending `task`'s turn writes if `worker_id` still holds it: the task's `changes`,
    its run (`outcome`, at `now`), its ledger row (`cost_usd`, `model`, `tokens`), the
    executor's `events`, and the task's `diff` when the turn changed its branch."""

    task: Task
    worker_id: str
    changes: dict
    outcome: str
    now: datetime
    cost_usd: Decimal
    model: str
    tokens: dict[str, int]
    events: list[tuple[str, dict]]
    diff: TaskDiff | None = None


def finish_update_sql(finish: TurnFinish) -> tuple[str, list]:
    """The update that ends the task's turn if the worker still holds it under the same claim:
    `changes` set (a thread id only when not empty), the run's cost added to the task's.
    It returns what the run's ledger row needs (`FINISH_RETURNS`); no row: not held."""
    task = finish.task
    sets, params = [], []
    for name, value in finish.changes.items():
        field = Task._meta.get_field(name)
        if name == "thread_id":
            sets.append(
                f"{qn(field.column)} = CASE WHEN %s <> '' THEN %s ELSE {qn(field.column)} END"
            )
            params.extend([value, value])
            continue
        sets.append(f"{qn(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    cost_column = column(Task, "cost_usd")
    sets.append(f"{cost_column} = {cost_column} + %s")
    params.append(connection.ops.adapt_decimalfield_value(finish.cost_usd, 14, 6))
    returning = ", ".join(
        f"{column(Task, name)} AS {alias}"
        for name, alias in zip(
            ("user", "id", "project", "turn", "thread_id", "executor"), FINISH_RETURNS, strict=True
        )
    )
    where = (
        f"{column(Task, 'id')} = %s AND {column(Task, 'status')} = '{TaskStatus.RUNNING}'"
        f" AND {column(Task, 'worker_id')} = %s"
    )
    params.extend([task.pk, finish.worker_id])
    if task.claimed_at is not None:  # the fence (a claim with no claim time: worker id only)
        where += f" AND {column(Task, 'claimed_at')} = %s"
        params.append(_dt(task.claimed_at))
    return f"UPDATE {table(Task)} SET {', '.join(sets)} WHERE {where} RETURNING {returning}", params


def finish_sql_postgresql(finish: TurnFinish) -> tuple[str, list]:
    """PostgreSQL: the whole `finish` of the task (as claimed) in one statement: the task's
    update (`finish_update_sql`), its run in the run history, its ledger row and the user's
    monthly total (`usage_ctes_postgresql`), the executor's events, and the task's diff
    when the turn changed its branch. Returns one row if the worker still held the task;
    none, and nothing written, if it did not."""
    task, now, events, diff = finish.task, finish.now, finish.events, finish.diff
    update, params = finish_update_sql(finish)
    run_columns = ", ".join(
        column(TaskRun, name)
        for name in (
            "task",
            "turn",
            "is_resume",
            "worker_id",
            "executor",
            "started_at",
            "finished_at",
            "outcome",
        )
    )
    run = (
        f"run AS (INSERT INTO {table(TaskRun)} ({run_columns})"
        " SELECT task_id, turn, %s, %s, executor, %s, %s, %s FROM fin)"
    )
    params.extend([task.is_resume, finish.worker_id, task.claimed_at or now, now, finish.outcome])
    usage, usage_params = usage_ctes_postgresql(
        source="fin",
        cost_usd=finish.cost_usd,
        finished_at=now,
        model=finish.model,
        tokens=finish.tokens,
    )
    ctes = [f"fin AS ({update})", run, usage]
    params.extend(usage_params)
    if events:
        event_columns = ", ".join(
            column(TaskEvent, name) for name in ("task", "turn", "kind", "data", "created_at")
        )
        ctes.append(
            f"events AS (INSERT INTO {table(TaskEvent)} ({event_columns})"
            " SELECT fin.task_id, fin.turn, e.kind, e.data, %s FROM fin"
            " CROSS JOIN jsonb_to_recordset(%s::jsonb) AS e(kind text, data jsonb))"
        )
        params.extend([now, json.dumps([{"kind": k, "data": d} for k, d in events])])
    if diff is not None:
        names = TASK_DIFF_COLUMNS
        updates = ", ".join(
            f"{column(TaskDiff, n)} = EXCLUDED.{column(TaskDiff, n)}" for n in names
        )
        ctes.append(
            f"diff AS (INSERT INTO {table(TaskDiff)} ({column(TaskDiff, 'task')}, "
            f"{', '.join(column(TaskDiff, n) for n in names)})"
            f" SELECT fin.task_id, {', '.join(['%s'] * len(names))} FROM fin"
            f" ON CONFLICT ({column(TaskDiff, 'task')}) DO UPDATE SET {updates})"
        )
        params.extend(
            TaskDiff._meta.get_field(name).get_db_prep_save(getattr(diff, name), connection)
            for name in names
        )
    return f"WITH {', '.join(ctes)} SELECT task_id FROM fin", params


# The columns of a task's diff a finish writes (beside the task's id).
TASK_DIFF_COLUMNS = (
    "base_commit",
    "head_commit",
    "diff",
    "diff_bytes",
    "truncated",
    "files_changed",
    "updated_at",
)
