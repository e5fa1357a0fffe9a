"""The usage ledger: recording what runs cost, and the check that keeps monthly totals honest.

Every ledger row is written by `usage_record`, which in the same transaction adds its cost to
the user's total for the UTC month it finished in (one atomic upsert) and, for a task run, to
the task's `cost_usd`. So a month's spend is one row read, and a task's cost is the sum of
its runs, however long the history. `monthly_spend_verify` and `task_cost_verify` recompute
both from the ledger and report (or repair) any drift.

On SQLite the month's upsert is a trigger on the ledger (`SQLITE_MONTH_TRIGGER`): SQLite
cannot write two tables in one statement, and the trigger saves the worker's finish a
statement. On PostgreSQL the worker's finish writes the row and the month in one statement
(`usage_ctes_postgresql`); `usage_record` upserts the month itself. All three write the one
upsert of `month_upsert_sql`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection, connections, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.models import MonthlySpend, Task, UsageKind, UsageRecord
from controlplane.months import month_bounds, month_of
from controlplane.rawsql import qn, sqlite_tables_and_triggers

logger = logging.getLogger(__name__)


def usage_record(
    *,
    user_id: int,
    cost_usd: Decimal,
    finished_at: datetime,
    kind: str = UsageKind.TASK_RUN,
    task_id: int | None = None,
    project_id: int | None = None,
    turn: int | None = None,
    thread_id: str = "",
    executor: str = "",
    model: str = "",
    input_tokens: int = 0,
    cached_input_tokens: int = 0,
    cache_write_input_tokens: int = 0,
    output_tokens: int = 0,
    reasoning_output_tokens: int = 0,
    add_to_task: bool = True,
) -> UsageRecord:
    """Append one ledger row; add its cost to the user's month and, for a task run, the task.

    All three writes are one transaction (the caller's, if any: no savepoint, so a failure here
    rolls the caller's writes back too), so the monthly total and the task's cost never
    disagree with the ledger. Concurrent callers for the same user and month serialise on the
    month's row and never lose an addition. `add_to_task=False`: the caller adds the cost to
    the task itself, in its own update of the task row in the same transaction.
    """
    cost_usd = usage_cost_checked(cost_usd=cost_usd, kind=kind)
    with transaction.atomic(savepoint=False):
        record = UsageRecord.objects.create(
            user_id=user_id,
            task_id=task_id,
            project_id=project_id,
            kind=kind,
            turn=turn,
            thread_id=thread_id[:200],
            executor=executor[:32],
            model=model[:200],
            input_tokens=input_tokens,
            cached_input_tokens=cached_input_tokens,
            cache_write_input_tokens=cache_write_input_tokens,
            output_tokens=output_tokens,
            reasoning_output_tokens=reasoning_output_tokens,
            cost_usd=cost_usd,
            finished_at=finished_at,
        )
        if not _month_by_trigger():
            _monthly_spend_add(user_id=user_id, month=month_of(finished_at), cost_usd=cost_usd)
        if add_to_task and task_id is not None and kind == UsageKind.TASK_RUN and cost_usd:
            Task.objects.filter(pk=task_id).update(cost_usd=F("cost_usd") + cost_usd)
    return record


def usage_cost_checked(*, cost_usd, kind: str) -> Decimal:
    """The cost as a Decimal, or DomainError for a cost that is not finite and >= 0 or an
    unknown kind: nothing is written then."""
    cost_usd = Decimal(cost_usd)
    if not cost_usd.is_finite() or cost_usd < 0:
        raise DomainError("A cost must be a finite amount >= 0.", field="cost_usd")
    if kind not in UsageKind.values:
        raise DomainError(f"Unknown usage kind {kind!r}.", field="kind")
    return cost_usd


_SOURCE_COLUMNS = ("user_id", "task_id", "project_id", "turn", "thread_id", "executor")


def usage_ctes_postgresql(
    *,
    source: str,
    cost_usd: Decimal,
    finished_at: datetime,
    kind: str = UsageKind.TASK_RUN,
    model: str = "",
    tokens: dict[str, int],
) -> tuple[str, list]:
    """PostgreSQL: the common table expressions that append one ledger row for each row of
    the CTE `source` (columns user_id, task_id, project_id, turn, thread_id, executor) and
    add its cost to the user's month, as `usage_record` does, for one statement that also
    writes the rows `source` returns (the worker's finish). `cost_usd` is checked
    (`usage_cost_checked`); the caller adds it to the task. Returns `name AS (...), ...` and
    its parameters, in order."""
    cost_usd = usage_cost_checked(cost_usd=cost_usd, kind=kind)
    ledger = qn(UsageRecord._meta.db_table)
    columns = [*_SOURCE_COLUMNS, "kind", "model", *tokens, "cost_usd", "finished_at"]
    columns.append("created_at")
    values = [
        *(f"s.{name}" for name in _SOURCE_COLUMNS),
        *(["%s"] * (len(columns) - len(_SOURCE_COLUMNS))),
    ]
    now = timezone.now()
    add_to_month = month_upsert_sql("SELECT user_id, %s, cost_usd, 1, %s FROM usage_row")
    sql = (
        f"usage_row AS (INSERT INTO {ledger} ({', '.join(qn(c) for c in columns)})"
        f" SELECT {', '.join(values)} FROM {source} s RETURNING user_id, cost_usd),"
        f" usage_month AS ({add_to_month})"
    )
    params = [kind, model[:200], *tokens.values(), cost_usd, finished_at, now]
    params += [month_of(finished_at), now]
    return sql, params


def month_upsert_sql(rows: str) -> str:
    """The upsert that adds ledger rows to their users' months, whoever runs it (`usage_record`
    on PostgreSQL, the worker's finish there, the SQLite trigger): `rows` gives (user_id,
    month, total_usd, entries, updated_at), a VALUES list or a SELECT. Atomic on both
    databases: the first writer of a month inserts its row, later (and concurrent) ones add
    to it under its row lock."""
    months = f'"{MonthlySpend._meta.db_table}"'
    return (
        f"INSERT INTO {months} (user_id, month, total_usd, entries, updated_at) {rows}"
        " ON CONFLICT (user_id, month) DO UPDATE SET"
        f" total_usd = {months}.total_usd + EXCLUDED.total_usd,"
        f" entries = {months}.entries + EXCLUDED.entries, updated_at = EXCLUDED.updated_at"
    )


# SQLite: every ledger row inserted adds itself to its user's UTC month (finished_at is stored
# as UTC text, 'YYYY-MM-DD HH:MM:SS[.ffffff]').
SQLITE_MONTH_TRIGGER = "usage_ledger_adds_to_month"


def sqlite_month_trigger_sql() -> str:
    """The SQLite trigger that runs `month_upsert_sql` for each ledger row inserted."""
    row = (
        "VALUES (NEW.user_id, strftime('%Y-%m-01', NEW.finished_at), NEW.cost_usd, 1,"
        " strftime('%Y-%m-%d %H:%M:%f', 'now'))"
    )
    return (
        f"CREATE TRIGGER IF NOT EXISTS {SQLITE_MONTH_TRIGGER} AFTER INSERT ON usage_ledger"
        f" BEGIN {month_upsert_sql(row)}; END"
    )


def _month_by_trigger() -> bool:
    return connection.vendor == "sqlite"


def sqlite_month_trigger_ensure(*, using: str = "default", **_kwargs) -> None:
    """Re-create the SQLite monthly-total trigger if a table rebuild dropped it.

    Django rebuilds a SQLite table to alter some of its columns, which drops the table's
    triggers; run after every `migrate` (post_migrate), this brings it back (a ledger row
    written without it would be missing from its month: `manage.py spend_check` finds it).
    """
    conn = connections[using]
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cursor:
        names = sqlite_tables_and_triggers(cursor)
        if "usage_ledger" not in names or SQLITE_MONTH_TRIGGER in names:
            return
        if "usage_monthly_spend" not in names:
            return  # not migrated this far yet: the migration creates it
        logger.warning(
            "the monthly spend trigger was missing (table rebuilt); re-creating it: run "
            "`manage.py spend_check --fix` if runs were recorded meanwhile"
        )
        cursor.execute(sqlite_month_trigger_sql())


def _monthly_spend_add(*, user_id: int, month: date, cost_usd: Decimal) -> None:
    """Add one entry of `cost_usd` to the user's month (`month_upsert_sql`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            month_upsert_sql("VALUES (%s, %s, %s, 1, %s)"),
            [
                user_id,
                connection.ops.adapt_datefield_value(month),
                connection.ops.adapt_decimalfield_value(cost_usd, 20, 6),
                connection.ops.adapt_datetimefield_value(timezone.now()),
            ],
        )


def monthly_spend_get(*, user_ids, month: date) -> dict[int, Decimal]:
    """The spend of each user in `month` (a user with nothing recorded is left out): one read
    of the unique (user, month) index."""
    user_ids = list(user_ids)
    if not user_ids:
        return {}
    rows = MonthlySpend.objects.filter(user_id__in=user_ids, month=month).values_list(
        "user_id", "total_usd"
    )
    return dict(rows)


# --- The honesty check --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpendDrift:
    """A month whose stored total disagrees with its ledger rows."""

    user_id: int
    month: date
    stored_usd: Decimal | None  # None: no stored row
    ledger_usd: Decimal
    stored_entries: int | None
    ledger_entries: int

    def __str__(self) -> str:
        stored = "missing"
        if self.stored_usd is not None:
            stored = f"${self.stored_usd} ({self.stored_entries} entries)"
        return (
            f"user {self.user_id} {self.month:%Y-%m}: stored {stored}, "
            f"ledger ${self.ledger_usd} ({self.ledger_entries} entries)"
        )


def _ledger_totals(*, user_id: int | None = None) -> dict[tuple[int, date], tuple[Decimal, int]]:
    """(user, month) -> (sum, count) of the ledger rows, the months found in Python.

    One pass over the ledger in (user, finished_at) order; an offline check, so its cost may
    grow with history (nothing on a request or worker path calls it).
    """
    rows = UsageRecord.objects.order_by("user_id", "finished_at")
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    totals: dict[tuple[int, date], list] = {}
    for uid, finished_at, cost in rows.values_list("user_id", "finished_at", "cost_usd").iterator(
        chunk_size=5000
    ):
        entry = totals.setdefault((uid, month_of(finished_at)), [Decimal("0"), 0])
        entry[0] += cost
        entry[1] += 1
    return {key: (total, count) for key, (total, count) in totals.items()}


def monthly_spend_verify(*, fix: bool = False, user_id: int | None = None) -> list[SpendDrift]:
    """Recompute every monthly total from the ledger; return the months that drifted.

    With `fix`, each drifted month is rewritten from its ledger rows under the month row's
    lock, summed inside that lock, so a run recorded meanwhile is neither lost nor counted
    twice. A stored month with no ledger rows is deleted.
    """
    ledger = _ledger_totals(user_id=user_id)
    stored_rows = MonthlySpend.objects.all()
    if user_id is not None:
        stored_rows = stored_rows.filter(user_id=user_id)
    stored = {
        (uid, month): (total, entries)
        for uid, month, total, entries in stored_rows.values_list(
            "user_id", "month", "total_usd", "entries"
        )
    }
    drifts = []
    for key in sorted(ledger.keys() | stored.keys()):
        ledger_usd, ledger_entries = ledger.get(key, (Decimal("0"), 0))
        stored_usd, stored_entries = stored.get(key, (None, None))
        if stored_usd == ledger_usd and stored_entries == ledger_entries:
            continue
        if stored_usd is None and not ledger_entries:
            continue
        drifts.append(
            SpendDrift(
                user_id=key[0],
                month=key[1],
                stored_usd=stored_usd,
                ledger_usd=ledger_usd,
                stored_entries=stored_entries,
                ledger_entries=ledger_entries,
            )
        )
    if fix:
        for drift in drifts:
            _monthly_spend_rewrite(user_id=drift.user_id, month=drift.month)
    return drifts


def _monthly_spend_rewrite(*, user_id: int, month: date) -> None:
    start, end = month_bounds(month)
    with transaction.atomic():
        # Make sure the row exists, then lock it: recorders of this month wait for us.
        _monthly_spend_add(user_id=user_id, month=month, cost_usd=Decimal("0"))
        row = MonthlySpend.objects.select_for_update().get(user_id=user_id, month=month)
        ledger = UsageRecord.objects.filter(
            user_id=user_id, finished_at__gte=start, finished_at__lt=end
        ).aggregate(total=Sum("cost_usd"), entries=Count("id"))
        if not ledger["entries"]:
            row.delete()
            return
        MonthlySpend.objects.filter(pk=row.pk).update(
            total_usd=ledger["total"], entries=ledger["entries"], updated_at=timezone.now()
        )


@dataclass(frozen=True)
class TaskCostDrift:
    """A task whose `cost_usd` is not the sum of its `task_run` ledger rows."""

    task_id: int
    stored_usd: Decimal
    ledger_usd: Decimal

    def __str__(self) -> str:
        return f"task {self.task_id}: cost ${self.stored_usd}, its runs ${self.ledger_usd}"


def task_cost_verify(*, fix: bool = False, user_id: int | None = None) -> list[TaskCostDrift]:
    """Compare every task's `cost_usd` with the sum of its runs in the ledger; with `fix`, set
    it to that sum under the task's row lock. An offline check, like `monthly_spend_verify`."""
    runs = UsageRecord.objects.filter(kind=UsageKind.TASK_RUN, task__isnull=False)
    tasks = Task.objects.all()
    if user_id is not None:
        runs = runs.filter(user_id=user_id)
        tasks = tasks.filter(user_id=user_id)
    ledger: dict[int, Decimal] = {}
    for task_id, cost in (
        runs.order_by("task_id").values_list("task_id", "cost_usd").iterator(chunk_size=5000)
    ):
        ledger[task_id] = ledger.get(task_id, Decimal("0")) + cost
    drifts = [
        TaskCostDrift(task_id=task_id, stored_usd=cost, ledger_usd=ledger.get(task_id, Decimal(0)))
        for task_id, cost in tasks.order_by("id")
        .values_list("id", "cost_usd")
        .iterator(chunk_size=5000)
        if cost != ledger.get(task_id, Decimal("0"))
    ]
    if fix:
        for drift in drifts:
            with transaction.atomic():
                # Lock the task: a run being recorded now adds its cost after our sum.
                list(Task.objects.select_for_update().filter(pk=drift.task_id).values("id"))
                total = UsageRecord.objects.filter(
                    task_id=drift.task_id, kind=UsageKind.TASK_RUN
                ).aggregate(total=Sum("cost_usd"))["total"]
                Task.objects.filter(pk=drift.task_id).update(cost_usd=total or Decimal("0"))
    return drifts
