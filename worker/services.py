"""The worker's business rules: claiming, heart-beating, finishing, re-queueing, recovering
(the worker processes' own rows: `worker.processes`).

Every state change of a task is one conditional statement: it applies only if the task is
still in the state (and held under the claim) the caller believes, and the caller learns
from the return value whether it did. Losing a race is normal, never an error. The hot path
is a claim and a finish (`worker.statements`); the run history gets one row per run, written
once when the run ends (a running task's open run is the task row itself).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from automemory.services import injector, task_keys
from automemory.services.injector import InjectionPreferences
from automemory.services.task_keys import task_key_new
from controlplane.access import member_role_sql, task_user_may_read
from controlplane.models import AuditEvent, Task, TaskDiff, TaskEvent, TaskStatus, UsageKind
from controlplane.rawsql import Scalar, column, instance_from_row, table
from controlplane.services.audit import audit_record
from controlplane.services.quota import (
    QuotaStatus,
    quota_sql,
    quota_status_from,
    quota_status_get,
)
from controlplane.services.usage import usage_cost_checked, usage_record
from worker import metrics, statements
from worker.executors.base import ExecutionResult
from worker.models import RunOutcome, TaskRun, WorkerProcess
from worker.workspace.checkouts import TurnChanges

logger = logging.getLogger(__name__)


def worker_id_default() -> str:
    """`<host>-<pid>-<random>`: unique across machines and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def worker_actor_label(*, worker_id: str) -> str:
    return f"worker:{worker_id}"


# --- Claiming ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A task now running under this worker, with what the claim read beside its row: the
    user's quota this month, the task's injection preferences and the user's role in the
    task's project (no statement of their own), and the memory tool key the claim minted for
    this turn (only its hash is stored). `unstored_key_hash`: the key's hash when the claim
    could not store it in its own statement (SQLite); the turn's preparation stores it."""

    task: Task
    quota: QuotaStatus
    preferences: InjectionPreferences
    memory_key: str = ""
    user_role: str | None = None
    unstored_key_hash: str = ""


def task_claim_next(
    *,
    worker_id: str,
    executor: str = "",
    queued_before: datetime | None = None,
    now: datetime | None = None,
) -> Claim | None:
    """Claim the oldest queued task for `worker_id`; None if none is left. One statement.

    An `UPDATE ... RETURNING` whose subquery picks the oldest queued task (on PostgreSQL
    with `FOR UPDATE SKIP LOCKED`, so concurrent workers each take a different task without
    waiting; SQLite runs one writer at a time) and whose update is conditional on
    `status = 'queued'`. It sets the task running under `worker_id` since `claimed_at` (the
    fence the worker's later writes check), and reads back the task, the user's quota and
    the task's injection preferences, and the user's role in the task's project (for
    `task_claim_refusal`). It mints a fresh memory tool key for the turn
    (`automemory.services.task_keys`) and, on PostgreSQL, stores its hash in the same
    statement; on SQLite the turn's preparation stores it (`Claim.unstored_key_hash`).
    `queued_before` limits the claim to tasks
    queued by then (`run_worker --once`).
    """
    now = now or timezone.now()
    minted = task_key_new()
    key_in_claim = task_keys.key_stored_by_claim()
    scalars = [
        Scalar(
            "user_role",
            member_role_sql(
                project_id_sql=_task_column("project"), user_id_sql=_task_column("user")
            ),
        ),
        *quota_sql(user_id_sql=_task_column("user"), now=now),
        *injector.preferences_sql(task_id_sql=_task_column("id"), user_id_sql=_task_column("user")),
    ]
    sql, params = statements.claim_sql(
        worker_id=worker_id,
        executor=executor,
        queued_before=queued_before,
        now=now,
        scalars=scalars,
        key_store=(
            (
                lambda source: task_keys.key_store_cte(
                    source=source, key_hash=minted.key_hash, claimed_at=now
                )
            )
            if key_in_claim
            else None
        ),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()  # all of them: SQLite ends the statement (and its write) here
    if not rows:
        return None
    task, values = instance_from_row(Task, rows[0], scalars=scalars)
    metrics.task_claims.labels(task.executor).inc()
    return Claim(
        task=task,
        quota=quota_status_from(values),
        preferences=injector.preferences_from(values),
        memory_key=minted.key,
        user_role=values["user_role"],
        unstored_key_hash="" if key_in_claim else minted.key_hash,
    )


def claim_key_store(claim: Claim) -> None:
    """Store the claim's memory tool key when its statement could not (SQLite); the worker's
    turn preparation stores it with the injected ids instead (`Worker.prepare`)."""
    if claim.unstored_key_hash:
        task_keys.task_state_store(
            task_id=claim.task.pk,
            key_hash=claim.unstored_key_hash,
            claimed_at=claim.task.claimed_at,
        )


def _task_column(name: str) -> str:
    return f"{table(Task)}.{column(Task, name)}"


# --- While running ----------------------------------------------------------------------------


def _owned(*, task_id: int, worker_id: str, claimed_at: datetime | None = None):
    """The task, if it is still running under `worker_id` (and, given, the same claim)."""
    tasks = Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING, worker_id=worker_id)
    if claimed_at is not None:
        tasks = tasks.filter(claimed_at=claimed_at)
    return tasks


def task_heartbeat(
    *, task_id: int, worker_id: str, claimed_at: datetime | None = None, now: datetime | None = None
) -> bool:
    """Refresh the heartbeat; False if the task is no longer running under `worker_id`.

    The worker's own `last_seen_at` moves with it, so a worker in a long turn looks alive.
    """
    now = now or timezone.now()
    WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=now)
    owned = _owned(task_id=task_id, worker_id=worker_id, claimed_at=claimed_at)
    return owned.update(heartbeat_at=now) == 1


def task_thread_record(
    *, task_id: int, worker_id: str, thread_id: str, claimed_at: datetime | None = None
) -> bool:
    """Store the agent's thread id as soon as the executor knows it (a resume continues it)."""
    owned = _owned(task_id=task_id, worker_id=worker_id, claimed_at=claimed_at)
    return owned.update(thread_id=thread_id) == 1


def task_base_record(
    *, task_id: int, worker_id: str, base_commit: str, claimed_at: datetime | None = None
) -> bool:
    """Record the commit the task's branch resolved to at its first turn (the commit every
    later turn's diff is against); False if the task is no longer held."""
    owned = _owned(task_id=task_id, worker_id=worker_id, claimed_at=claimed_at)
    return owned.update(base_commit=base_commit) == 1


def _run_history(*, task: Task, worker_id: str, outcome: str, now: datetime) -> TaskRun:
    """The run that ends now, as a row of the run history (written once, when it ends)."""
    return TaskRun(
        task_id=task.pk,
        turn=task.turn,
        is_resume=task.is_resume,
        worker_id=worker_id,
        executor=task.executor,
        started_at=task.claimed_at or now,
        finished_at=now,
        outcome=outcome,
    )


def _release(
    *,
    task: Task,
    worker_id: str,
    changes: dict,
    outcome: str,
    now: datetime,
    audit: tuple[str, dict] | None = None,
) -> bool:
    """Apply `changes` to `task` if `worker_id` still holds it under the same claim, write the
    run to the run history and, given `audit` (action, data), the worker's audit event; False
    (nothing written) if it does not hold it.

    Callers run it inside their transaction, with whatever else ends the turn.
    """
    owned = _owned(task_id=task.pk, worker_id=worker_id, claimed_at=task.claimed_at)
    if owned.update(**changes) != 1:
        return False
    _run_history(task=task, worker_id=worker_id, outcome=outcome, now=now).save()
    if audit is not None:
        action, data = audit
        audit_record(
            action=action,
            actor_label=worker_actor_label(worker_id=worker_id),
            target_type="task",
            target_id=task.pk,
            data=data,
        )
    return True


# --- Ending a turn ----------------------------------------------------------------------------


def task_finish(
    *,
    task: Task,
    worker_id: str,
    result: ExecutionResult,
    now: datetime | None = None,
    turn_changes: TurnChanges | None = None,
) -> bool:
    """Record the turn's result if `worker_id` still holds `task` (as claimed); False (nothing
    written) if not.

    Completed or failed, `result_text` and `failure_reason` replaced, `finished_at` set, the
    thread id kept, the executor's events stored, the run written to the run history and to
    the usage ledger (its usage, cost, model, executor, thread and turn), which adds its cost
    to the task's cost and the user's monthly spend, and, given the turn's `turn_changes` to the
    task's repository, its branch's new head, changed files and diff: all at once. On
    PostgreSQL that is one statement (`statements.finish_sql_postgresql`); on SQLite one
    short transaction.
    """
    now = now or timezone.now()
    status = TaskStatus.COMPLETED if result.status == "completed" else TaskStatus.FAILED
    cost_usd = usage_cost_checked(cost_usd=result.cost_usd or 0, kind=UsageKind.TASK_RUN)
    changes = {
        "status": status,
        "result_text": result.result_text,
        "failure_reason": "" if status == TaskStatus.COMPLETED else result.failure_reason,
        "finished_at": now,
        "heartbeat_at": None,
        "is_resume": False,
        "updated_at": now,
        "thread_id": result.thread_id or "",
    }
    diff = None
    if turn_changes is not None:
        changes["head_commit"] = turn_changes.head_commit
        changes["changed_files"] = turn_changes.diff.changed_files
        diff = _task_diff(task_id=task.pk, turn_changes=turn_changes, now=now)
    finish = statements.TurnFinish(
        task=task,
        worker_id=worker_id,
        changes=changes,
        outcome=status,
        now=now,
        cost_usd=cost_usd,
        model=result.model,
        tokens=asdict(result.usage),
        events=[(event.kind, event.data) for event in result.events],
        diff=diff,
    )
    if connection.vendor == "postgresql":
        sql, params = statements.finish_sql_postgresql(finish)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            finished = bool(cursor.fetchall())
    else:
        finished = _finish_in_transaction(finish)
    if finished:
        outcomes = (
            metrics.task_completions if status == TaskStatus.COMPLETED else metrics.task_failures
        )
        outcomes.labels(task.executor).inc()
    return finished


def _task_diff(*, task_id: int, turn_changes: TurnChanges, now: datetime) -> TaskDiff:
    diff = turn_changes.diff
    return TaskDiff(
        task_id=task_id,
        base_commit=turn_changes.base_commit,
        head_commit=turn_changes.head_commit,
        diff=diff.diff,
        diff_bytes=diff.diff_bytes,
        truncated=diff.truncated,
        files_changed=diff.files_changed,
        updated_at=now,
    )


def task_finish_recorded(*, task: Task, worker_id: str, now: datetime) -> bool:
    """Whether `worker_id`'s finish of `task`'s turn, stamped `now`, is in the database.

    A finish whose reply was lost with its connection may have committed; its retry then
    finds the task no longer running and writes nothing. This tells the two apart: the
    run history holds the run that finish wrote, with its exact `finished_at`.
    """
    return TaskRun.objects.filter(
        task_id=task.pk,
        turn=task.turn,
        worker_id=worker_id,
        finished_at=now,
        outcome__in=(RunOutcome.COMPLETED, RunOutcome.FAILED),
    ).exists()


def _finish_in_transaction(finish: statements.TurnFinish) -> bool:
    """The finish on databases without data-modifying CTEs (SQLite): the task's update
    returns what the ledger row needs, then the run, the ledger row and the monthly total
    (and the task's diff, when the turn changed its branch)."""
    task, now, events, diff = finish.task, finish.now, finish.events, finish.diff
    sql, params = statements.finish_update_sql(finish)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        if not rows:
            return False
        row = dict(zip(statements.FINISH_RETURNS, rows[0], strict=True))
        _run_history(task=task, worker_id=finish.worker_id, outcome=finish.outcome, now=now).save()
        usage_record(
            user_id=row["user_id"],
            task_id=task.pk,
            project_id=row["project_id"],
            kind=UsageKind.TASK_RUN,
            turn=row["turn"],
            thread_id=row["thread_id"],
            executor=row["executor"],
            model=finish.model,
            cost_usd=finish.cost_usd,
            finished_at=now,
            add_to_task=False,
            **finish.tokens,
        )
        if events:
            TaskEvent.objects.bulk_create(
                [TaskEvent(task_id=task.pk, turn=row["turn"], kind=k, data=d) for k, d in events]
            )
        if diff is not None:
            TaskDiff.objects.bulk_create(
                [diff],
                update_conflicts=True,
                unique_fields=["task"],
                update_fields=list(statements.TASK_DIFF_COLUMNS),
            )
    return True


def task_claim_refusal(*, claim: Claim) -> tuple[str, str] | None:
    """Why the claimed task may not run, as `(kind, reason)`, else None; nothing is injected
    or run for a refused task.

    `membership`: its user may no longer read its project (removed from it since it was
    queued): their task gets nothing of the project's memories. `quota`: their monthly quota
    is used up (`task_quota_refusal`). Both read from what the claim read.
    """
    if not task_user_may_read(claim.user_role):
        return "membership", "the task's user is no longer a member of its project"
    refusal = task_quota_refusal(task=claim.task, quota=claim.quota)
    return ("quota", refusal) if refusal else None


def task_quota_refusal(*, task: Task, quota: QuotaStatus | None = None) -> str | None:
    """Why the task's user may not run it now (their monthly quota is used up), else None.

    `quota` is the status the claim read; without it the quota is read (an unlimited, or
    zero, limit decides alone, without reading the user's spend).
    """
    if quota is None:
        quota = quota_status_get(user_id=task.user_id, always_read_spend=False)
    if not quota.exhausted:
        return None
    remaining = quota.remaining_percent.normalize()
    limit = quota.monthly_limit_usd or Decimal("0")
    spent = quota.spent_usd
    spent_text = f" (spent ${spent:.2f} this month)" if spent is not None else ""
    return f"monthly quota exhausted: {remaining:f}% of ${limit:.2f} left{spent_text}"


def task_refuse(
    *, task: Task, worker_id: str, reason: str, kind: str = "quota", now: datetime | None = None
) -> bool:
    """Fail the task without running it (`task_claim_refusal`'s `kind`: quota or
    membership): the reason shows in its detail and in the audit event."""
    now = now or timezone.now()
    changes = {
        "status": TaskStatus.FAILED,
        "failure_reason": reason,
        "finished_at": now,
        "is_resume": False,
    }
    audit = ("worker_task_refused", {"reason": reason, "kind": kind})
    if not _give_back(task, worker_id, changes, RunOutcome.REFUSED, now, audit):
        return False
    if kind == "quota":
        metrics.quota_refusals.inc()
    return True


def task_requeue(
    *, task: Task, worker_id: str, reason: str = "worker shutdown", now: datetime | None = None
) -> bool:
    """Put a task this worker holds back in the queue as a resume of the same turn.

    It keeps its place in the queue (its `queued_at`), so it is the next one claimed.
    """
    now = now or timezone.now()
    changes = {"status": TaskStatus.QUEUED, "is_resume": True, "worker_id": ""}
    audit = ("worker_task_requeued", {"turn": task.turn, "reason": reason})
    if not _give_back(task, worker_id, changes, RunOutcome.REQUEUED, now, audit):
        return False
    logger.info("task %s turn %s re-queued as a resume (%s)", task.pk, task.turn, reason)
    return True


def _give_back(
    task: Task, worker_id: str, changes: dict, outcome: str, now: datetime, audit: tuple
) -> bool:
    """End the worker's hold on a task it did not run (`_release` in its own transaction):
    `changes` plus no heartbeat (the memory key dies with the running state)."""
    changes = {**changes, "heartbeat_at": None, "updated_at": now}
    with transaction.atomic():
        return _release(
            task=task, worker_id=worker_id, changes=changes, outcome=outcome, now=now, audit=audit
        )


# --- Recovery ---------------------------------------------------------------------------------

_RECOVERY_FIELDS = (
    "id",
    "turn",
    "worker_id",
    "heartbeat_at",
    "is_resume",
    "claimed_at",
    "executor",
    "updated_at",
)


def tasks_recover_stale(
    *, stale_after: timedelta, actor_label: str = "", now: datetime | None = None
) -> list[int]:
    """Re-queue running tasks whose heartbeat is older than `stale_after` as resumes.

    Same turn, `is_resume` set (the injector gives a resume nothing). One read when nothing
    is stale; else one transaction for the whole batch (up to 100 tasks): the stale rows are
    locked (on PostgreSQL skipping rows another worker holds, such as a task its worker is
    finishing right now) and re-read, re-queued by one update, and their lost runs and
    audit events written by one insert each. Two workers recovering at once recover a task
    once. Returns the ids recovered.
    """
    now = now or timezone.now()
    cutoff = now - stale_after
    stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, updated_at__lt=cutoff)
    running = Task.objects.filter(stale, status=TaskStatus.RUNNING)
    candidates = list(running.order_by("id").values_list("id", flat=True)[:100])
    if not candidates:
        return []
    with transaction.atomic():
        locked = running.filter(pk__in=candidates).order_by("id")
        if connection.features.has_select_for_update_skip_locked:
            locked = locked.select_for_update(skip_locked=True)
        rows = [
            dict(zip(_RECOVERY_FIELDS, row, strict=True))
            for row in locked.values_list(*_RECOVERY_FIELDS)
        ]
        if not rows:
            return []
        ids = [row["id"] for row in rows]
        Task.objects.filter(pk__in=ids).update(
            status=TaskStatus.QUEUED,
            is_resume=True,
            worker_id="",
            heartbeat_at=None,
            updated_at=now,
        )
        _record_lost_runs(rows=rows, now=now)
        AuditEvent.objects.bulk_create(
            [
                AuditEvent(
                    actor_label=actor_label,
                    action="worker_task_recovered",
                    target_type="task",
                    target_id=str(row["id"]),
                    data={
                        "turn": row["turn"],
                        "stale_worker_id": row["worker_id"],
                        "last_heartbeat_at": (
                            row["heartbeat_at"].isoformat() if row["heartbeat_at"] else None
                        ),
                    },
                )
                for row in rows
            ]
        )
    for row in rows:
        logger.warning(
            "task %s turn %s: worker %s stopped heart-beating (last %s); re-queued as a resume",
            row["id"],
            row["turn"],
            row["worker_id"] or "?",
            row["heartbeat_at"],
        )
        metrics.task_recoveries.inc()
    return ids


def _record_lost_runs(*, rows: list[dict], now: datetime) -> None:
    """Write each recovered run to the run history as `lost`, one row per task. A task that
    already has an open `running` row (a worker that opens its run row at the claim, and
    leaves no claim time on the task) gets that row closed as `lost` instead of a second one."""
    ids = [row["id"] for row in rows]
    open_runs = TaskRun.objects.filter(task_id__in=ids, outcome=RunOutcome.RUNNING)
    with_open_run = set(open_runs.values_list("task_id", flat=True))
    if with_open_run:
        open_runs.update(outcome=RunOutcome.LOST, finished_at=now)
    TaskRun.objects.bulk_create(
        [
            TaskRun(
                task_id=row["id"],
                turn=row["turn"],
                is_resume=row["is_resume"],
                worker_id=row["worker_id"],
                executor=row["executor"],
                started_at=row["claimed_at"] or row["updated_at"],
                finished_at=now,
                outcome=RunOutcome.LOST,
            )
            for row in rows
            if row["id"] not in with_open_run
        ]
    )
