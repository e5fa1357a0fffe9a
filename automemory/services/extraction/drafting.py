"""Drafting: what a task's memory says, by the model or by the deterministic strategy.

With the user's `extract_model`, the model writes the draft (`model.model_memory_draft`),
unless the task has a paid draft kept from an earlier sweep (same model, task unchanged);
the model's failures are raised, except that `fallback_to_deterministic` turns an
unavailable model or a spent budget into the deterministic text, which the log detail then
says. Without a model, the configured deterministic strategy writes it. `NoDurableSignal`
says there is nothing to remember.
"""

import logging

from automemory.models import AutoMemorySettings, Reason
from automemory.services.extraction.candidates import Candidate
from automemory.services.extraction.deterministic import render_memory_content
from automemory.services.extraction.drafts import (
    MemoryDraft,
    NoDurableSignal,
    draft_from_kept,
    draft_usable,
)
from automemory.services.extraction.model import model_memory_draft
from automemory.services.llm import MemoryBudgetExhausted, ModelUnavailable, SweepModelCalls

logger = logging.getLogger(__name__)


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
    client's exceptions."""
    task, prefs = candidate.task, candidate.prefs
    injected = candidate.injected.fingerprints
    model = extract_model(prefs)
    if not model:
        return deterministic_draft(candidate)
    if draft_usable(candidate.kept_draft, task=task, model=model):
        return draft_from_kept(candidate.kept_draft)
    try:
        return model_memory_draft(task, model=model, calls=calls, injected=injected)
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


def deterministic_draft(candidate: Candidate) -> MemoryDraft:
    """The configured deterministic strategy's text; `NoDurableSignal` when it is empty."""
    content = render_memory_content(candidate.task, injected=candidate.injected.fingerprints)
    if not content.strip():
        raise NoDurableSignal("the result adds nothing to the goal")
    return MemoryDraft(content)
