"""The extraction log: what a sweep decided per task (`Verdict`), the task's log row, and what
the sweep did in all (`SweepSummary`).

One row per task, overwritten by each attempt (it never grows). An extracted task's row is
written in the transaction that writes its memory (`log_row_write`); every other verdict of
a batch goes in one upsert at the end (`log_rows_write`), which also forgets the kept drafts
of the tasks it answers for good. Errors back off from a minute to an hour;
`model_unavailable` waits twice as long each time in a row, within its bounds.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from automemory import conf
from automemory.models import AutoMemoryLog, ExtractionDraft, Outcome, Reason
from automemory.models.log import STABLE_REASONS
from controlplane.models import Task

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
    Reason.PRIVATE_CONTENT,
    Reason.ALREADY_KNOWN,
    Reason.NO_DURABLE_SIGNAL,
    Reason.MODEL_UNAVAILABLE,
    Reason.MEMORY_BUDGET_EXHAUSTED,
)
# How an extraction went into the memories, each counted (0 included) in `extractions`;
# their sum is `extracted`, and the log's reason of each extracted task is one of them.
EXTRACTION_REASONS = (
    Reason.NEW,
    Reason.SUPERSEDED,
    Reason.SUPERSEDED_ON_WRITE,
    Reason.MERGED,
    Reason.HELD_FOR_AUTHOR,
)


@dataclass
class Verdict:
    """One task's answer in this sweep: what its log row will say.

    `logged` is set when the row was already written with the memory (one transaction), and
    `written_elsewhere` when another sweep wrote the task's memory first (its row stands).
    """

    outcome: str
    reason: str
    detail: str = ""
    memory_id: int | None = None
    retry_after: datetime | None = None
    superseded_count: int = 0
    logged: bool = False
    written_elsewhere: bool = False


def skipped(reason: str, detail: str = "", **fields: Any) -> Verdict:
    return Verdict(Outcome.SKIPPED, reason, detail, **fields)


@dataclass
class SweepSummary:
    """What one sweep did: tasks examined, memories written, superseded and retracted, skips.

    `extracted` counts the tasks logged `extracted` by this sweep, `extractions` the same
    tasks by log reason; `superseded` counts memories this sweep made superseded (an older
    one replaced, one superseded as soon as it was written, those a consolidation replaced).
    `deferred` counts tasks left untouched for a later sweep (the model call cap, another
    sweep holding the user's lease, the lease lost mid-sweep).
    """

    scanned: int = 0
    extracted: int = 0
    extractions: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((reason.value for reason in EXTRACTION_REASONS), 0)
    )
    superseded: int = 0
    retracted: int = 0
    skipped: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((reason.value for reason in SKIP_REASONS), 0)
    )
    errors: int = 0
    forced: bool = False
    model_calls: int = 0
    deferred: int = 0

    def count(self, verdict: Verdict) -> None:
        """Add one task's verdict (a task another sweep wrote counts as scanned only)."""
        self.scanned += 1
        if verdict.written_elsewhere:
            return
        if verdict.outcome == Outcome.EXTRACTED:
            self.extracted += 1
            self.extractions[str(verdict.reason)] += 1
            self.superseded += verdict.superseded_count
        elif verdict.outcome == Outcome.SKIPPED:
            reason = str(verdict.reason)
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        else:
            self.errors += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "extracted": self.extracted,
            "extractions": dict(self.extractions),
            "superseded": self.superseded,
            "retracted": self.retracted,
            "skipped": dict(self.skipped),
            "errors": self.errors,
            "model_calls": self.model_calls,
            "deferred": self.deferred,
            "forced": self.forced,
        }


ERROR_BACKOFF_BASE = timedelta(minutes=1)
_UPDATE_FIELDS = [
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


def log_row(
    task: Task, verdict: Verdict, previous: AutoMemoryLog | None, *, now: datetime, force: bool
) -> AutoMemoryLog:
    """The task's log row for this attempt (unsaved), counting on from `previous`."""
    attempts = (previous.attempts + 1) if previous else 1
    retry_after = verdict.retry_after
    if verdict.outcome == Outcome.ERROR:
        retry_after = now + ERROR_BACKOFF_BASE * min(2 ** (attempts - 1), 60)
    elif verdict.reason == Reason.MODEL_UNAVAILABLE and retry_after is None:
        retry_after = now + _model_unavailable_backoff(previous)
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


def _model_unavailable_backoff(previous: AutoMemoryLog | None) -> timedelta:
    """How long a task waits after `model_unavailable`: the base wait, doubled each time in
    a row the model was away, at most the maximum."""
    base = timedelta(seconds=conf.get("MODEL_UNAVAILABLE_RETRY_SECONDS"))
    ceiling = timedelta(seconds=conf.get("MODEL_UNAVAILABLE_RETRY_MAX_SECONDS"))
    wait = base
    if (
        previous is not None
        and previous.reason == Reason.MODEL_UNAVAILABLE
        and previous.retry_after is not None
    ):
        wait = max(base, (previous.retry_after - previous.last_attempt_at) * 2)
    return min(wait, ceiling)


def _upsert(rows: list[AutoMemoryLog]) -> None:
    AutoMemoryLog.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["task"], update_fields=_UPDATE_FIELDS
    )


def log_row_write(
    task: Task, verdict: Verdict, previous: AutoMemoryLog | None, *, now: datetime, force: bool
) -> None:
    """Write one task's row (inside the caller's transaction, with its memory)."""
    _upsert([log_row(task, verdict, previous, now=now, force=force)])


def log_rows_write(
    answered: Sequence[tuple[Task, Verdict, AutoMemoryLog | None]],
    *,
    now: datetime,
    force: bool,
    with_drafts: set[int] = frozenset(),
) -> None:
    """One upsert for a batch's verdicts not written with a memory; the kept drafts of the
    tasks settled for good are forgotten (among `with_drafts`, those that may have one).

    An `extracted` row is never overwritten by a skip or an error, and a task whose memory
    another sweep wrote (a race lost here) keeps that sweep's row: this one is written only
    while that one is missing.
    """
    pending = [
        (task, verdict, previous) for task, verdict, previous in answered if not verdict.logged
    ]
    protected = [
        task.pk
        for task, verdict, _ in pending
        if verdict.outcome != Outcome.EXTRACTED or verdict.written_elsewhere
    ]
    extracted = set(
        AutoMemoryLog.objects.filter(task_id__in=protected, outcome=Outcome.EXTRACTED).values_list(
            "task_id", flat=True
        )
        if protected
        else ()
    )
    rows = [
        log_row(task, verdict, previous, now=now, force=force)
        for task, verdict, previous in pending
        if task.pk not in extracted
    ]
    if rows:
        _upsert(rows)
    settled = [
        task.pk for task, verdict, _ in answered if task.pk in with_drafts and _settled(verdict)
    ]
    if settled:
        ExtractionDraft.objects.filter(task_id__in=settled).delete()


def _settled(verdict: Verdict) -> bool:
    """Whether the task's kept draft is no longer needed: a stable skip, or the memory was
    written (by another writer). A transient skip or an error is retried with its draft."""
    if verdict.outcome == Outcome.SKIPPED:
        return verdict.reason in STABLE_REASONS
    return verdict.outcome == Outcome.EXTRACTED
