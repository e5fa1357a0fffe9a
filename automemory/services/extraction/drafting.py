"""Drafting: what a task's memory says (`MemoryDraft`), by the model or the deterministic
strategy, and the paid drafts kept until they are written.

With the user's `extract_model`, the model writes the draft (`model_draft`, the call in `model`),
unless the task has a paid draft kept from an earlier sweep (same model, task unchanged);
the model's failures are raised, except that `fallback_to_deterministic` turns an
unavailable model or a spent budget into the deterministic text, which the log detail then
says. Without a model, the configured deterministic strategy writes it
(`deterministic.render_memory_content`). `NoDurableSignal` says there is nothing to remember.

A draft the extraction model wrote was paid for, so it is stored (`ExtractionDraft`) in the
transaction that records the call in the ledger, and deleted in the one that writes the
task's memory and log row (`writing`) or by the log when the task is settled otherwise: a
sweep that dies in between, or whose consolidation step fails, leaves it for the next sweep,
which uses it instead of paying again while the task and the model are unchanged.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from automemory.models import AutoMemorySettings, ExtractionDraft, Reason
from automemory.models.citations import MAX_CITATIONS_PER_MEMORY
from automemory.services.extraction.candidates import Candidate
from automemory.services.extraction.deterministic import render_memory_content
from automemory.services.extraction.model import (
    KINDS,
    MAX_KEYWORDS,
    REASON_MAX_CHARS,
    model_answer,
)
from automemory.services.llm import (
    MemoryBudgetExhausted,
    ModelCallCapReached,
    ModelUnavailable,
    SweepModelCalls,
)
from automemory.services.provenance import Fingerprint
from automemory.services.redactor import redacted_slice
from automemory.services.text import keywords_clean, memory_text_clean, one_line
from controlplane.models import Task

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryDraft:
    """The memory's text and keywords, as the writer receives them.

    `content` is redacted and free of injected memories (still checked for private text
    before it is written); `keywords` come cleaned from the extraction model (none from the
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


def extract_model(prefs: AutoMemorySettings) -> str:
    return (prefs.extract_model or "").strip()


def consolidation_model(prefs: AutoMemorySettings) -> str:
    return (prefs.consolidation_model or "").strip()


def model_steps(candidate: Candidate) -> int:
    """How many model calls the task may need (repairs aside): its extraction (unless a kept
    draft answers for it) and its consolidation, each when the user set its model."""
    model = extract_model(candidate.prefs)
    extraction = bool(model) and not draft_usable(
        candidate.kept_draft, task=candidate.task, model=model
    )
    return int(extraction) + int(bool(consolidation_model(candidate.prefs)))


def memory_draft(candidate: Candidate, *, calls: SweepModelCalls) -> MemoryDraft:
    """The task's draft (see the module's docstring); raises `NoDurableSignal` or the model
    client's exceptions, and `ModelCallCapReached` before any call when the task's model
    calls (extraction and consolidation) do not all fit under the sweep's cap: an extraction
    paid now and a consolidation refused would wait anyway, so the task is left whole."""
    if calls.used + model_steps(candidate) > calls.limit:
        raise ModelCallCapReached(f"this sweep's {calls.limit} model calls are used")
    task, prefs = candidate.task, candidate.prefs
    model = extract_model(prefs)
    if not model:
        return deterministic_draft(candidate)
    if draft_usable(candidate.kept_draft, task=task, model=model):
        return draft_from_kept(candidate.kept_draft)
    try:
        return model_draft(task, model=model, calls=calls, injected=candidate.injected_fingerprints)
    except (ModelUnavailable, MemoryBudgetExhausted) as exc:
        if not prefs.fallback_to_deterministic:
            raise
        reason = (
            Reason.MEMORY_BUDGET_EXHAUSTED
            if isinstance(exc, MemoryBudgetExhausted)
            else Reason.MODEL_UNAVAILABLE
        )
        logger.warning(
            "auto memory: task %s gets the deterministic text (%s: %s)", task.pk, reason, exc
        )
        draft = deterministic_draft(candidate)
        return MemoryDraft(draft.content, note=f"deterministic text written ({reason}: {exc})")


def model_draft(
    task: Task, *, model: str, calls: SweepModelCalls | None, injected: Sequence[Fingerprint] = ()
) -> MemoryDraft:
    """The memory `model` writes for `task`, kept as the task's draft when it is paid for
    (with the call's ledger row). Raises `NoDurableSignal` when the model judges nothing
    worth remembering, and the `llm` exceptions when the call fails."""
    drafted: list[MemoryDraft | NoDurableSignal] = []

    def keep(answer: dict) -> None:
        try:
            draft = answer_draft(answer, injected=injected)
        except NoDurableSignal as declined:
            draft_keep(task=task, model=model, draft=None, declined=str(declined))
            drafted.append(declined)
        else:
            draft_keep(task=task, model=model, draft=draft)
            drafted.append(draft)

    answer = model_answer(task, model=model, calls=calls, keep_answer=keep, injected=injected)
    # The answer was drafted once, when it was kept with its ledger row.
    draft = drafted[-1] if drafted else answer_draft(answer, injected=injected)
    if isinstance(draft, NoDurableSignal):
        raise draft
    return draft


def answer_draft(answer: dict, *, injected: Sequence[Fingerprint] = ()) -> MemoryDraft:
    """The model's answer as a draft: its memory and keywords cut, cleaned of the task's
    injected memories and redacted. `NoDurableSignal` when it declined (or wrote nothing)."""
    reason = one_line(redacted_slice(answer["reason"], end=REASON_MAX_CHARS * 4), REASON_MAX_CHARS)
    if not answer["worth_remembering"]:
        raise NoDurableSignal(f"the model found nothing durable: {reason}" if reason else "")
    memory = memory_text_clean(answer["memory"], fingerprints=injected)
    if not memory:
        raise NoDurableSignal("the model's memory was empty")
    kind = answer.get("kind") if answer.get("kind") in KINDS else ""
    return MemoryDraft(
        content=memory,
        keywords=keywords_clean(answer["keywords"], limit=MAX_KEYWORDS),
        kind=kind if kind != "none" else "",
        citations=_citations(answer.get("citations")),
    )


def _citations(value: object) -> tuple[dict, ...]:
    """The answer's citations, well formed or not (each is checked before it is kept): one
    more than MAX_CITATIONS_PER_MEMORY at most, so the check can say some were cut."""
    if not isinstance(value, list):
        return ()
    return tuple(
        {key: item.get(key) for key in ("path", "start_line", "end_line")}
        for item in value[: MAX_CITATIONS_PER_MEMORY + 1]
        if isinstance(item, dict)
    )


def deterministic_draft(candidate: Candidate) -> MemoryDraft:
    """The configured deterministic strategy's text; `NoDurableSignal` when it is empty."""
    content = render_memory_content(candidate.task, injected=candidate.injected_fingerprints)
    if not content.strip():
        raise NoDurableSignal("the result adds nothing to the goal")
    return MemoryDraft(content)


# --- Paid drafts kept until written ----------------------------------------------------------


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
