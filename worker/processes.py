"""The worker processes' own rows: registering at start, being seen, stopping, and the list
an operator reads (`manage.py workers`)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.models import Task, TaskStatus
from worker.models import WorkerProcess


def worker_register(
    *, worker_id: str, executor: str, code_signature: str = "", now: datetime | None = None
) -> WorkerProcess:
    now = now or timezone.now()
    process, _ = WorkerProcess.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "executor": executor,
            "code_signature": code_signature,
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
