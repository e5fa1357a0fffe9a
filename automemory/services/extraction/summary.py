"""What a sweep decided per task (`Verdict`) and what it did in all (`SweepSummary`)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from automemory.models import Outcome, Reason

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
