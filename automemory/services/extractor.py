"""Extraction: completed, idle tasks become project-level memories.

`process_auto_memories()` runs one sweep. The worker calls it at the end of every round
(`user=None`: everyone's tasks); the run endpoint and `manage.py run_auto_memory` call it for
one user. Each candidate goes through the gates in order (generate switch, idle, duration and
length, external context, quota); a task that fails one is logged as skipped with the reason
and tried again later. A task that passes becomes one project memory; when another memory of
the same project has the same goal, the one whose task finished later stays active.

Cost: the global sweep reads only what may have a new answer (tasks completed or updated
since a cursor, and the retry set: transient skips and errors whose `retry_after` has come,
and skips marked for a recheck after a settings or flags change), so it grows with pending
work, not with history. Lookups are batched: the
read side runs a fixed number of queries whatever the number of candidates.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from automemory import conf
from automemory.models import (
    MAX_ERROR_ATTEMPTS,
    STABLE_REASONS,
    TRANSIENT_REASONS,
    AutoMemoryLog,
    AutoMemorySettings,
    Outcome,
    Reason,
    SweepState,
    TaskAutoMemoryFlags,
)
from automemory.services.content import goal_key, render_memory_content
from automemory.services.preferences import effective_switch
from automemory.services.redactor import redact
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    Task,
    TaskFollowup,
    TaskStatus,
)
from controlplane.services import quota as quota_service

logger = logging.getLogger(__name__)

GLOBAL_SWEEP = "global"
# Transactions that committed late may carry an `updated_at` a little behind the cursor;
# the cursor never advances past `now - this`, so such tasks are still seen next round.
CURSOR_SAFETY_MARGIN = timedelta(seconds=30)
ERROR_BACKOFF_BASE = timedelta(minutes=1)
# Every gate's reason code, reported with a count (0 included) in each summary.
SKIP_REASONS = (
    Reason.GENERATE_DISABLED,
    Reason.NOT_IDLE,
    Reason.MISSING_TIMESTAMPS,
    Reason.DURATION_TOO_SHORT,
    Reason.RESULT_TOO_SHORT,
    Reason.EXTERNAL_CONTEXT,
    Reason.QUOTA_LOW,
    Reason.QUOTA_CHECK_FAILED,
)


@dataclass
class SweepSummary:
    """What one sweep did: tasks examined, memories written and superseded, skips by reason."""

    scanned: int = 0
    extracted: int = 0
    superseded: int = 0
    skipped: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((reason.value for reason in SKIP_REASONS), 0)
    )
    errors: int = 0
    forced: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "extracted": self.extracted,
            "superseded": self.superseded,
            "skipped": dict(self.skipped),
            "errors": self.errors,
            "forced": self.forced,
        }


@dataclass
class _Verdict:
    outcome: str
    reason: str
    detail: str = ""
    memory_id: int | None = None
    retry_after: datetime | None = None


def process_auto_memories(
    *, user=None, force: bool = False, now: datetime | None = None
) -> SweepSummary:
    """Run one extraction sweep over completed tasks, of one user or of everyone.

    `force` skips the idle, duration and length gates (never the switch, external-context or
    quota gates). Returns the summary; never raises for one task's failure (it is logged).
    """
    now = now or timezone.now()
    summary = SweepSummary(forced=force)
    batch_size = conf.get("SWEEP_BATCH_SIZE")
    if user is None:
        tasks, advance_cursor = _global_candidates(now=now, force=force, limit=batch_size)
    else:
        tasks, advance_cursor = _user_candidates(user=user, force=force), None
    if tasks:
        _process_batch(tasks, now=now, force=force, summary=summary)
    if advance_cursor is not None:
        advance_cursor()
    if summary.scanned:
        logger.info(
            "auto memory sweep%s: scanned %d, extracted %d, superseded %d, skipped %s, errors %d",
            f" for user {user.pk}" if user is not None else "",
            summary.scanned,
            summary.extracted,
            summary.superseded,
            {k: v for k, v in summary.skipped.items() if v},
            summary.errors,
        )
    return summary


# --- Candidate selection ---------------------------------------------------------------------


def _not_extracted() -> Q:
    extracted_log = AutoMemoryLog.objects.filter(task=OuterRef("pk"), outcome=Outcome.EXTRACTED)
    auto_memory = IdentityMemory.objects.filter(
        source=MemorySource.AUTO, source_task=OuterRef("pk")
    )
    return ~Q(Exists(extracted_log)) & ~Q(Exists(auto_memory))


def _unchanged_stable_skip() -> Q:
    """A skip that holds until the task changes or a settings/flags change asks for a recheck."""
    log = "auto_memory_log"
    return Q(
        **{
            f"{log}__outcome": Outcome.SKIPPED,
            f"{log}__reason__in": STABLE_REASONS,
            f"{log}__recheck": False,
            f"{log}__last_attempt_at__gte": F("updated_at"),
        }
    )


def _candidate_order(queryset: QuerySet[Task]) -> QuerySet[Task]:
    # Never-tried tasks first, then the longest-waiting, so a bounded batch is fair.
    return queryset.order_by(
        F("auto_memory_log__last_attempt_at").asc(nulls_first=True), "finished_at", "id"
    )


def _user_candidates(*, user, force: bool) -> list[Task]:
    """One user's completed, not yet extracted tasks that may have a new answer."""
    queryset = Task.objects.filter(Q(user=user, status=TaskStatus.COMPLETED) & _not_extracted())
    if not force:
        queryset = queryset.exclude(_unchanged_stable_skip())
    limit = conf.get("SWEEP_BATCH_SIZE") * 4
    return list(_candidate_order(queryset)[:limit])


def _global_candidates(*, now: datetime, force: bool, limit: int):
    """Tasks that may have a new answer since the last global round, and a cursor-advancer.

    Two bounded sources: completed tasks changed since the cursor, and the retry set
    (transient skips and errors under the retry cap whose `retry_after` has come, stable
    skips marked for a recheck).
    """
    state, _ = SweepState.objects.get_or_create(name=GLOBAL_SWEEP)
    completed = Task.objects.filter(status=TaskStatus.COMPLETED)

    fresh = completed.filter(_not_extracted())
    if state.cursor_updated_at is not None:
        fresh = fresh.filter(
            Q(updated_at__gt=state.cursor_updated_at)
            | Q(updated_at=state.cursor_updated_at, id__gt=state.cursor_task_id)
        )
    # Transient skips and errors already tried are the retry set's, with their back-off.
    fresh = (
        fresh.exclude(_unchanged_stable_skip())
        .exclude(
            auto_memory_log__outcome=Outcome.SKIPPED,
            auto_memory_log__reason__in=TRANSIENT_REASONS,
        )
        .exclude(auto_memory_log__outcome=Outcome.ERROR)
    )
    fresh_tasks = list(fresh.order_by("updated_at", "id")[:limit])

    if force:
        retry = AutoMemoryLog.objects.exclude(outcome=Outcome.EXTRACTED)
    else:
        # The retry set's partial index predicate, spelled as in the index so it is used.
        retry = AutoMemoryLog.objects.filter(
            Q(outcome=Outcome.ERROR)
            | Q(outcome=Outcome.SKIPPED, reason__in=TRANSIENT_REASONS)
            | Q(recheck=True)
        ).exclude(outcome=Outcome.ERROR, attempts__gte=MAX_ERROR_ATTEMPTS)
        retry = retry.filter(
            Q(recheck=True) | Q(retry_after__isnull=True) | Q(retry_after__lte=now)
        )
    retry_ids = set(retry.order_by("last_attempt_at").values_list("task_id", flat=True)[:limit]) - {
        task.pk for task in fresh_tasks
    }
    retry_tasks = list(completed.filter(_not_extracted(), pk__in=retry_ids)) if retry_ids else []

    def advance_cursor() -> None:
        # Only to a task actually seen, and never past `wall clock - margin`: a transaction
        # that commits late with an older `updated_at` is still read next round.
        wall = timezone.now()
        SweepState.objects.filter(name=GLOBAL_SWEEP).update(last_sweep_at=wall)
        seen = [task for task in fresh_tasks if task.updated_at <= wall - CURSOR_SAFETY_MARGIN]
        if not seen:
            return
        last = seen[-1]
        behind = (
            Q(cursor_updated_at__isnull=True)
            | Q(cursor_updated_at__lt=last.updated_at)
            | Q(cursor_updated_at=last.updated_at, cursor_task_id__lt=last.pk)
        )
        # Another worker's sweep may be further already: never move the cursor back.
        SweepState.objects.filter(behind, name=GLOBAL_SWEEP).update(
            cursor_updated_at=last.updated_at, cursor_task_id=last.pk
        )

    return fresh_tasks + retry_tasks, advance_cursor


# --- Gates -----------------------------------------------------------------------------------


def _process_batch(tasks: list[Task], *, now: datetime, force: bool, summary: SweepSummary):
    task_ids = [task.pk for task in tasks]
    user_ids = {task.user_id for task in tasks}
    settings_by_user = {
        row.user_id: row for row in AutoMemorySettings.objects.filter(user_id__in=user_ids)
    }
    flags_by_task = {
        row.task_id: row for row in TaskAutoMemoryFlags.objects.filter(task_id__in=task_ids)
    }
    logs_by_task = {row.task_id: row for row in AutoMemoryLog.objects.filter(task_id__in=task_ids)}
    messaged = set(
        TaskFollowup.objects.filter(task_id__in=task_ids)
        .order_by()
        .values_list("task_id", flat=True)
        .distinct()
    )

    verdicts: dict[int, _Verdict] = {}
    awaiting_quota: list[Task] = []
    for task in tasks:
        prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)
        verdict = _early_gates(
            task,
            prefs=prefs,
            flags=flags_by_task.get(task.pk),
            received_message=task.pk in messaged,
            now=now,
            force=force,
        )
        if verdict is None:
            awaiting_quota.append(task)
        else:
            verdicts[task.pk] = verdict

    if awaiting_quota:
        statuses = _quota_statuses({task.user_id for task in awaiting_quota}, now=now)
        extractable = []
        for task in awaiting_quota:
            prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)
            status = statuses.get(task.user_id)
            if status is None:
                verdicts[task.pk] = _Verdict(
                    Outcome.SKIPPED,
                    Reason.QUOTA_CHECK_FAILED,
                    "quota could not be read",
                    retry_after=now + timedelta(seconds=conf.get("QUOTA_CHECK_RETRY_SECONDS")),
                )
            elif status.remaining_percent < prefs.min_rate_limit_remaining_percent:
                verdicts[task.pk] = _Verdict(
                    Outcome.SKIPPED,
                    Reason.QUOTA_LOW,
                    f"{status.remaining_percent}% of the monthly quota left, "
                    f"below {prefs.min_rate_limit_remaining_percent}%",
                    retry_after=now + timedelta(seconds=conf.get("QUOTA_LOW_RETRY_SECONDS")),
                )
            else:
                extractable.append(task)
        _extract_all(extractable, verdicts=verdicts, summary=summary)

    _write_logs(tasks, verdicts=verdicts, logs_by_task=logs_by_task, now=now, force=force)
    summary.scanned += len(tasks)
    for verdict in verdicts.values():
        if verdict.outcome == Outcome.SKIPPED:
            reason = str(verdict.reason)
            summary.skipped[reason] = summary.skipped.get(reason, 0) + 1
        elif verdict.outcome == Outcome.ERROR:
            summary.errors += 1


def _early_gates(
    task: Task,
    *,
    prefs: AutoMemorySettings,
    flags: TaskAutoMemoryFlags | None,
    received_message: bool,
    now: datetime,
    force: bool,
) -> _Verdict | None:
    """Gates 1 to 4 in SPEC order; None when the task may go on to the quota gate."""
    skip = Outcome.SKIPPED
    flag = flags.generate_memories if flags is not None else None
    if not effective_switch(flag, prefs.generate_memories):
        source = "task flag" if flag is not None else "user setting"
        return _Verdict(skip, Reason.GENERATE_DISABLED, f"generate_memories off ({source})")
    if not force:
        if task.finished_at is None:
            return _Verdict(skip, Reason.MISSING_TIMESTAMPS, "finished_at is not set")
        idle = (now - task.finished_at).total_seconds()
        if idle < prefs.idle_seconds:
            return _Verdict(
                skip,
                Reason.NOT_IDLE,
                f"idle {int(idle)}s of the {prefs.idle_seconds}s needed",
                retry_after=task.finished_at + timedelta(seconds=prefs.idle_seconds),
            )
        if task.started_at is None:
            return _Verdict(skip, Reason.MISSING_TIMESTAMPS, "started_at is not set")
        duration = (task.finished_at - task.started_at).total_seconds()
        if duration < prefs.min_duration_seconds:
            return _Verdict(
                skip,
                Reason.DURATION_TOO_SHORT,
                f"ran {duration:.0f}s, under {prefs.min_duration_seconds}s",
            )
        length = len(task.result_text or "")
        if length < prefs.min_result_chars:
            return _Verdict(
                skip,
                Reason.RESULT_TOO_SHORT,
                f"result has {length} characters, under {prefs.min_result_chars}",
            )
    if prefs.disable_on_external_context:
        if received_message:
            return _Verdict(skip, Reason.EXTERNAL_CONTEXT, "received an inter-task message")
        if task.parent_task_id is not None:
            return _Verdict(skip, Reason.EXTERNAL_CONTEXT, "subtask of a coordinator task")
    return None


def _quota_statuses(user_ids: set[int], *, now: datetime) -> dict[int, Any]:
    """Quota per user; an empty answer when it cannot be read (the gate then fails closed)."""
    try:
        return quota_service.quota_statuses_get(user_ids=sorted(user_ids), now=now)
    except Exception:
        logger.warning(
            "auto memory: quota could not be read for users %s; skipping their tasks",
            sorted(user_ids),
            exc_info=True,
        )
        return {}


# --- Writing memories --------------------------------------------------------------------------


class _AlreadyExtracted(Exception):
    """Another sweep wrote this task's memory first."""


def _extract_all(tasks: list[Task], *, verdicts: dict[int, _Verdict], summary: SweepSummary):
    for task in tasks:
        try:
            memory, superseded_count, replaced_older = _extract_one(task)
        except _AlreadyExtracted:
            existing = (
                IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task_id=task.pk)
                .values_list("pk", flat=True)
                .first()
            )
            verdicts[task.pk] = _Verdict(Outcome.EXTRACTED, Reason.NEW, "", existing)
            continue
        except Exception as exc:
            logger.exception("auto memory: extracting task %s failed", task.pk)
            verdicts[task.pk] = _Verdict(
                Outcome.ERROR, Reason.ERROR, redact(f"{type(exc).__name__}: {exc}")[:1000]
            )
            continue
        summary.extracted += 1
        summary.superseded += superseded_count
        reason = Reason.SUPERSEDED if replaced_older else Reason.NEW
        verdicts[task.pk] = _Verdict(Outcome.EXTRACTED, reason, "", memory.pk)


def _extract_one(task: Task, attempts: int = 3) -> tuple[IdentityMemory, int, bool]:
    """Write the task's memory and settle which memory of its goal stays active.

    Returns the memory, how many memories became superseded, and whether it replaced an
    older active one. Races with other sweeps end
    in an IntegrityError from one of the two unique constraints: losing the one-per-task
    race means the work is done; losing the one-active-per-goal race means try again.
    """
    content = render_memory_content(task)
    key = goal_key(task)
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return _write_memory(task, content=content, key=key)
        except IntegrityError:
            if IdentityMemory.objects.filter(
                source=MemorySource.AUTO, source_task_id=task.pk
            ).exists():
                raise _AlreadyExtracted from None
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _write_memory(task: Task, *, content: str, key: str) -> tuple[IdentityMemory, int, bool]:
    current = (
        IdentityMemory.objects.select_for_update()
        .filter(
            project_id=task.project_id,
            goal_key=key,
            source=MemorySource.AUTO,
            status=MemoryStatus.ACTIVE,
        )
        .first()
    )
    memory = IdentityMemory(
        scope=MemoryScope.PROJECT,
        project_id=task.project_id,
        content=content,
        source=MemorySource.AUTO,
        source_task_id=task.pk,
        goal_key=key,
        source_finished_at=task.finished_at,
        created_by_id=task.user_id,
    )
    if current is not None and _finished_later(current, task):
        # The active memory's task finished later: this one is history from the start.
        memory.status = MemoryStatus.SUPERSEDED
        memory.superseded_by = current
        memory.save()
        return memory, 1, False
    if current is not None:
        # Retire the older memory before inserting, so the partial unique index holds.
        IdentityMemory.objects.filter(pk=current.pk).update(
            status=MemoryStatus.SUPERSEDED, updated_at=timezone.now()
        )
    memory.save()
    if current is not None:
        IdentityMemory.objects.filter(pk=current.pk).update(superseded_by=memory)
        return memory, 1, True
    return memory, 0, False


def _finished_later(memory: IdentityMemory, task: Task) -> bool:
    """True when the memory's source task finished after `task` (ties: the higher task id)."""
    theirs = memory.source_finished_at
    mine = task.finished_at
    if theirs is None or mine is None:
        return theirs is not None and mine is None
    if theirs != mine:
        return theirs > mine
    return (memory.source_task_id or 0) > task.pk


# --- The log -----------------------------------------------------------------------------------


def _log_row(
    task: Task, verdict: _Verdict, previous: AutoMemoryLog | None, now: datetime, force: bool
) -> AutoMemoryLog:
    attempts = (previous.attempts + 1) if previous else 1
    retry_after = verdict.retry_after
    if verdict.outcome == Outcome.ERROR:
        retry_after = now + ERROR_BACKOFF_BASE * min(2 ** (attempts - 1), 60)
    return AutoMemoryLog(
        task_id=task.pk,
        user_id=task.user_id,
        outcome=verdict.outcome,
        reason=verdict.reason,
        memory_id=verdict.memory_id,
        forced=force,
        recheck=False,
        attempts=attempts,
        retry_after=retry_after,
        detail=verdict.detail,
        first_attempt_at=previous.first_attempt_at if previous else now,
        last_attempt_at=now,
    )


_LOG_UPDATE_FIELDS = [
    "outcome",
    "reason",
    "memory",
    "forced",
    "recheck",
    "attempts",
    "retry_after",
    "detail",
    "last_attempt_at",
]


def _write_logs(tasks, *, verdicts, logs_by_task, now, force) -> None:
    """One upsert for the whole batch: one row per task, overwritten by each attempt."""
    rows = [_log_row(t, verdicts[t.pk], logs_by_task.get(t.pk), now, force) for t in tasks]
    # A skip or error must not overwrite an `extracted` row another sweep wrote meanwhile.
    not_extracted_here = [row.task_id for row in rows if row.outcome != Outcome.EXTRACTED]
    extracted_meanwhile = set(
        AutoMemoryLog.objects.filter(
            task_id__in=not_extracted_here, outcome=Outcome.EXTRACTED
        ).values_list("task_id", flat=True)
    )
    rows = [row for row in rows if row.task_id not in extracted_meanwhile]
    AutoMemoryLog.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["task"], update_fields=_LOG_UPDATE_FIELDS
    )
