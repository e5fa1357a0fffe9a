"""The worker's business rules: claiming, heart-beating, finishing, re-queueing, recovering.

Every state change of a task is one conditional statement inside a transaction: it applies
only if the task is still in the state (and owned by the worker) the caller believes, and the
caller learns from the return value whether it did. Losing a race is normal, never an error.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.models import Task, TaskEvent, TaskStatus, UsageKind
from controlplane.services.audit import audit_record
from controlplane.services.quota import quota_status_get
from controlplane.services.usage import usage_record
from worker import metrics
from worker.executors.base import ExecutionResult
from worker.models import RunOutcome, TaskRun, WorkerProcess

logger = logging.getLogger(__name__)


def worker_id_default() -> str:
    """`<host>-<pid>-<random>`: unique across machines and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def worker_actor_label(*, worker_id: str) -> str:
    return f"worker:{worker_id}"


# --- Worker processes -------------------------------------------------------------------------


def worker_register(*, worker_id: str, executor: str, now: datetime | None = None) -> WorkerProcess:
    now = now or timezone.now()
    process, _ = WorkerProcess.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "executor": executor,
            "started_at": now,
            "last_seen_at": now,
            "stopped_at": None,
        },
    )
    return process


def worker_seen(*, worker_id: str, now: datetime | None = None) -> None:
    WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=now or timezone.now())


def worker_stopped(*, worker_id: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=now, stopped_at=now)


@dataclass(frozen=True)
class WorkerStatus:
    """A worker process as an operator sees it: `state` is alive, stale or stopped."""

    process: WorkerProcess
    state: str
    task_ids: list[int]


def workers_status_list(
    *,
    include_stopped: bool = False,
    stale_after: timedelta | None = None,
    limit: int = 100,
    now: datetime | None = None,
) -> list[WorkerStatus]:
    """The newest worker processes (running ones only unless `include_stopped`), each with
    whether it looks alive and the tasks it holds; two queries.

    Alive: not stopped and seen (each round, each task heartbeat) within `stale_after`
    (default `WORKER_STALE_AFTER_SECONDS`); stale: not stopped but silent longer (killed,
    or its host lost); its tasks are then recovered by the other workers.
    """
    now = now or timezone.now()
    if stale_after is None:
        stale_after = timedelta(seconds=settings.WORKER_STALE_AFTER_SECONDS)
    processes = WorkerProcess.objects.order_by("-started_at", "-id")
    if not include_stopped:
        processes = processes.filter(stopped_at__isnull=True)
    processes = list(processes[:limit])
    held: dict[str, list[int]] = {}
    for worker_id, task_id in (
        Task.objects.filter(
            status=TaskStatus.RUNNING, worker_id__in=[p.worker_id for p in processes]
        )
        .order_by("id")
        .values_list("worker_id", "id")
    ):
        held.setdefault(worker_id, []).append(task_id)
    statuses = []
    for process in processes:
        if process.stopped_at is not None:
            state = "stopped"
        elif process.last_seen_at < now - stale_after:
            state = "stale"
        else:
            state = "alive"
        statuses.append(WorkerStatus(process, state, held.get(process.worker_id, [])))
    return statuses


# --- Claiming ---------------------------------------------------------------------------------


def _queued_tasks(*, queued_before: datetime | None):
    tasks = Task.objects.filter(status=TaskStatus.QUEUED)
    if queued_before is not None:
        tasks = tasks.filter(Q(queued_at__lte=queued_before) | Q(queued_at__isnull=True))
    return tasks.order_by("queued_at", "id")


def task_claim_next(
    *,
    worker_id: str,
    executor: str = "",
    queued_before: datetime | None = None,
    now: datetime | None = None,
) -> Task | None:
    """Claim the oldest queued task for `worker_id` and return it running; None if none is left.

    On PostgreSQL the candidate row is locked with `FOR UPDATE SKIP LOCKED`, so concurrent
    workers each take a different task without waiting for one another. Everywhere the update
    is conditional on `status = 'queued'` and its row count checked, so a task lost to another
    worker is skipped silently. `queued_before` limits the claim to tasks queued by then
    (`run_worker --once`).
    """
    skip_locked = connection.features.has_select_for_update_skip_locked
    for _attempt in range(5):
        with transaction.atomic():
            candidates = _queued_tasks(queued_before=queued_before)
            if skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            task = candidates.first()
            if task is None:
                return None
            claimed = _task_claim(task=task, worker_id=worker_id, executor=executor, now=now)
        if claimed is not None:
            metrics.task_claims.labels(claimed.executor).inc()
            return claimed
    return None


def _task_claim(*, task: Task, worker_id: str, executor: str, now: datetime | None) -> Task | None:
    now = now or timezone.now()
    keep_started = task.is_resume and task.started_at is not None
    changes = {
        "status": TaskStatus.RUNNING,
        "worker_id": worker_id,
        "heartbeat_at": now,
        "finished_at": None,
        "failure_reason": "",
        "updated_at": now,
    }
    if executor:
        changes["executor"] = executor
    if not keep_started:
        changes["started_at"] = now
    updated = Task.objects.filter(pk=task.pk, status=TaskStatus.QUEUED).update(**changes)
    if updated != 1:
        return None  # another worker was faster
    for name, value in changes.items():
        setattr(task, name, value)
    TaskRun.objects.create(
        task=task,
        turn=task.turn,
        is_resume=task.is_resume,
        worker_id=worker_id,
        executor=executor,
        started_at=now,
    )
    return task


# --- While running ----------------------------------------------------------------------------


def _owned(*, task_id: int, worker_id: str):
    return Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING, worker_id=worker_id)


def task_heartbeat(*, task_id: int, worker_id: str, now: datetime | None = None) -> bool:
    """Refresh the heartbeat; False if the task is no longer running under `worker_id`.

    The worker's own `last_seen_at` moves with it, so a worker in a long turn looks alive.
    """
    now = now or timezone.now()
    WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=now)
    return _owned(task_id=task_id, worker_id=worker_id).update(heartbeat_at=now) == 1


def task_thread_record(*, task_id: int, worker_id: str, thread_id: str) -> bool:
    """Store the agent's thread id as soon as the executor knows it (a resume continues it)."""
    return _owned(task_id=task_id, worker_id=worker_id).update(thread_id=thread_id) == 1


def _close_run(*, task_id: int, worker_id: str, outcome: str, now: datetime) -> None:
    TaskRun.objects.filter(task_id=task_id, worker_id=worker_id, outcome=RunOutcome.RUNNING).update(
        outcome=outcome, finished_at=now
    )


def _release(*, task_id: int, worker_id: str, changes: dict, outcome: str, now: datetime) -> bool:
    """Apply `changes` to a task `worker_id` still holds and close its run; False if it does not.

    Callers run it inside their transaction, with whatever else ends the turn.
    """
    if _owned(task_id=task_id, worker_id=worker_id).update(**changes) != 1:
        return False
    _close_run(task_id=task_id, worker_id=worker_id, outcome=outcome, now=now)
    return True


# --- Ending a turn ----------------------------------------------------------------------------


def task_finish(
    *, task_id: int, worker_id: str, result: ExecutionResult, now: datetime | None = None
) -> bool:
    """Record the turn's result if `worker_id` still holds the task; False (nothing written) if not.

    Completed or failed, `result_text` and `failure_reason` replaced, `finished_at` set, the
    thread id kept, the executor's events stored, and the run written to the usage ledger
    (its usage, cost, model, executor, thread and turn), which adds its cost to the task's
    cost and the user's monthly spend: all in one transaction.
    """
    now = now or timezone.now()
    status = TaskStatus.COMPLETED if result.status == "completed" else TaskStatus.FAILED
    changes = {
        "status": status,
        "result_text": result.result_text,
        "failure_reason": "" if status == TaskStatus.COMPLETED else result.failure_reason,
        "finished_at": now,
        "heartbeat_at": None,
        "is_resume": False,
        "updated_at": now,
    }
    if result.thread_id:
        changes["thread_id"] = result.thread_id
    with transaction.atomic():
        if not _release(
            task_id=task_id, worker_id=worker_id, changes=changes, outcome=status, now=now
        ):
            return False
        user_id, project_id, turn, executor, thread_id = Task.objects.filter(
            pk=task_id
        ).values_list("user_id", "project_id", "turn", "executor", "thread_id")[0]
        usage_record(
            user_id=user_id,
            task_id=task_id,
            project_id=project_id,
            kind=UsageKind.TASK_RUN,
            turn=turn,
            thread_id=thread_id,
            executor=executor,
            model=result.model,
            cost_usd=Decimal(result.cost_usd or 0),
            finished_at=now,
            **asdict(result.usage),
        )
        if result.events:
            TaskEvent.objects.bulk_create(
                [
                    TaskEvent(task_id=task_id, turn=turn, kind=event.kind, data=event.data)
                    for event in result.events
                ]
            )
    outcomes = metrics.task_completions if status == TaskStatus.COMPLETED else metrics.task_failures
    outcomes.labels(executor).inc()
    return True


def task_quota_refusal(*, task: Task) -> str | None:
    """Why the task's user may not run it now (their monthly quota is used up), else None.

    An unlimited (or zero) limit decides alone, without reading the user's spend.
    """
    quota = quota_status_get(user_id=task.user_id, always_read_spend=False)
    if not quota.exhausted:
        return None
    remaining = quota.remaining_percent.normalize()
    limit = quota.monthly_limit_usd or Decimal("0")
    spent = quota.spent_usd
    spent_text = f" (spent ${spent:.2f} this month)" if spent is not None else ""
    return f"monthly quota exhausted: {remaining:f}% of ${limit:.2f} left{spent_text}"


def task_refuse(*, task_id: int, worker_id: str, reason: str, now: datetime | None = None) -> bool:
    """Fail the task without running it (quota refusal): the reason shows in its detail."""
    now = now or timezone.now()
    changes = {
        "status": TaskStatus.FAILED,
        "failure_reason": reason,
        "finished_at": now,
        "heartbeat_at": None,
        "is_resume": False,
        "updated_at": now,
    }
    with transaction.atomic():
        if not _release(
            task_id=task_id,
            worker_id=worker_id,
            changes=changes,
            outcome=RunOutcome.REFUSED,
            now=now,
        ):
            return False
        audit_record(
            action="worker_task_refused",
            actor_label=worker_actor_label(worker_id=worker_id),
            target_type="task",
            target_id=task_id,
            data={"reason": reason},
        )
    metrics.quota_refusals.inc()
    return True


def task_requeue(
    *, task_id: int, worker_id: str, reason: str = "worker shutdown", now: datetime | None = None
) -> bool:
    """Put a task this worker holds back in the queue as a resume of the same turn.

    It keeps its place in the queue (its `queued_at`), so it is the next one claimed.
    """
    now = now or timezone.now()
    with transaction.atomic():
        task = _owned(task_id=task_id, worker_id=worker_id).only("id", "turn").first()
        if task is None:
            return False
        changes = {
            "status": TaskStatus.QUEUED,
            "is_resume": True,
            "worker_id": "",
            "heartbeat_at": None,
            "updated_at": now,
        }
        if not _release(
            task_id=task_id,
            worker_id=worker_id,
            changes=changes,
            outcome=RunOutcome.REQUEUED,
            now=now,
        ):
            return False
        audit_record(
            action="worker_task_requeued",
            actor_label=worker_actor_label(worker_id=worker_id),
            target_type="task",
            target_id=task_id,
            data={"turn": task.turn, "reason": reason},
        )
    logger.info("task %s turn %s re-queued as a resume (%s)", task_id, task.turn, reason)
    return True


# --- Recovery ---------------------------------------------------------------------------------


def tasks_recover_stale(
    *, stale_after: timedelta, actor_label: str = "", now: datetime | None = None
) -> list[int]:
    """Re-queue running tasks whose heartbeat is older than `stale_after` as resumes.

    Same turn, `is_resume` set (the injector gives a resume nothing). Each task is taken back
    with a conditional update, so two workers recovering at once recover it once. Returns the
    ids recovered.
    """
    now = now or timezone.now()
    cutoff = now - stale_after
    stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, updated_at__lt=cutoff)
    candidates = list(
        Task.objects.filter(stale, status=TaskStatus.RUNNING)
        .order_by("id")
        .values_list("id", "turn", "worker_id", "heartbeat_at")[:100]
    )
    recovered = []
    for task_id, turn, old_worker, heartbeat_at in candidates:
        with transaction.atomic():
            updated = Task.objects.filter(
                stale, pk=task_id, status=TaskStatus.RUNNING, worker_id=old_worker
            ).update(
                status=TaskStatus.QUEUED,
                is_resume=True,
                worker_id="",
                heartbeat_at=None,
                updated_at=now,
            )
            if updated != 1:
                continue
            _close_run(task_id=task_id, worker_id=old_worker, outcome=RunOutcome.LOST, now=now)
            audit_record(
                action="worker_task_recovered",
                actor_label=actor_label,
                target_type="task",
                target_id=task_id,
                data={
                    "turn": turn,
                    "stale_worker_id": old_worker,
                    "last_heartbeat_at": heartbeat_at.isoformat() if heartbeat_at else None,
                },
            )
        logger.warning(
            "task %s turn %s: worker %s stopped heart-beating (last %s); re-queued as a resume",
            task_id,
            turn,
            old_worker or "?",
            heartbeat_at,
        )
        metrics.task_recoveries.inc()
        recovered.append(task_id)
    return recovered
