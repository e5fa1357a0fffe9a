"""Drafts: what a task's memory will say, and paid extractions kept until they are written.

Both strategies hand the sweep a `MemoryDraft` (or raise `NoDurableSignal`). A draft the
extraction model wrote was paid for, so it is stored (`ExtractionDraft`) in the transaction
that records the call in the ledger and deleted in the one that writes the task's memory and
log row: a sweep that dies in between, or whose consolidation step fails, leaves it for the
next sweep, which uses it instead of paying again while the task and the model are unchanged.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from automemory.models import ExtractionDraft
from controlplane.models import Task


@dataclass(frozen=True)
class MemoryDraft:
    """The memory's text and keywords, as the writer receives them.

    `content` is redacted and free of injected memories (still checked for private text
    before it is written); `keywords` come from the extraction model (none from the
    deterministic strategy); `note` is a line for the task's log detail (the deterministic
    text was written because the model was away, the extraction was kept from an earlier
    sweep); `kind` is the extraction model's kind of fact (`model.KINDS`; "" when not
    known: the memory table does not keep it). `citations`: the lines of code the extraction
    model says the memory speaks of (unchecked); None for the deterministic text (its
    citations come from the task's diff: automemory.services.citations.extracted).
    """

    content: str
    keywords: list[str] = field(default_factory=list)
    note: str = ""
    kind: str = ""
    citations: tuple[dict, ...] | None = None


class NoDurableSignal(Exception):
    """The task holds nothing worth remembering (the model's judgement, or a result that
    adds nothing to the goal); the message says why, redacted."""


def drafts_read(task_ids: Iterable[int]) -> dict[int, ExtractionDraft]:
    """The kept drafts of these tasks, by task id (one query)."""
    ids = list(task_ids)
    if not ids:
        return {}
    return {row.task_id: row for row in ExtractionDraft.objects.filter(task_id__in=ids)}


def draft_usable(row: ExtractionDraft | None, *, task: Task, model: str) -> bool:
    """Whether a kept draft still answers for `task`: same extraction model, task unchanged."""
    return row is not None and row.extract_model == model and row.task_updated_at == task.updated_at


def draft_from_kept(row: ExtractionDraft) -> MemoryDraft:
    """The kept draft as the writer takes it; `NoDurableSignal` when the model declined."""
    if not row.content:
        raise NoDurableSignal(row.declined_reason)
    return MemoryDraft(
        row.content, list(row.keywords or []), "extraction kept from an earlier sweep"
    )


def draft_keep(*, task: Task, model: str, draft: MemoryDraft | None, declined: str = "") -> None:
    """Store a paid extraction (`draft`, or None with why the model declined) for `task`."""
    ExtractionDraft.objects.update_or_create(
        task_id=task.pk,
        defaults={
            "extract_model": model,
            "task_updated_at": task.updated_at,
            "content": draft.content if draft is not None else "",
            "keywords": list(draft.keywords) if draft is not None else [],
            "declined_reason": declined if draft is None else "",
        },
    )


def drafts_discard(task_ids: Iterable[int]) -> None:
    """Forget the kept drafts of these tasks (their answer is written)."""
    ids = list(task_ids)
    if ids:
        ExtractionDraft.objects.filter(task_id__in=ids).delete()
