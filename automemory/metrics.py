"""Prometheus counters of auto memory: sweeps, extractions, injections, redactions,
embeddings and ranking's falls back to keywords.

Counted where the work is done (`services.extraction.sweep`, `services.injector`,
`services.redactor`); listed with their labels in docs/operations.md. A leaf module: it
imports nothing of this project, and callers hand it plain values.
"""

import collections
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter

sweeps = Counter(
    "automemory_sweeps",
    "Extraction sweeps run, by scope (all users at a worker's round end, or one user's run).",
    ["scope"],
)
sweeps_busy = Counter(
    "automemory_sweeps_busy",
    "Sweeps not run because another sweeper held the lease, by scope (all users, or one user).",
    ["scope"],
)
extractions = Counter(
    "automemory_extractions",
    "Extraction attempts by outcome (extracted, skipped, error) and reason code.",
    ["outcome", "reason"],
)
retractions = Counter(
    "automemory_retractions",
    "Auto memories withdrawn because their task saw external context after extraction.",
)
injections = Counter(
    "automemory_injections",
    "Task turns started with a memory block in front of their prompt.",
)
injected_memories = Counter(
    "automemory_injected_memories",
    "Memories injected into prompts, by scope (user or project memory).",
    ["scope"],
)
redaction_calls = Counter(
    "automemory_redaction_calls",
    "Texts passed through the redactor.",
)
redactions = Counter(
    "automemory_redactions",
    "Secrets replaced by the redactor, by rule id.",
    ["rule"],
)

embedded_memories = Counter(
    "automemory_embedded_memories",
    "Memories embedded by the embedding pass (the vectors ranking by meaning reads).",
)
embedding_seconds = Counter(
    "automemory_embedding_seconds",
    "Seconds the embedding pass spent in the embedding model.",
)
keyword_fallbacks = Counter(
    "automemory_keyword_fallbacks",
    "Times memories were ranked, or left pending, without vectors because the embedding "
    "model or the vector store was unavailable, by where (ranking, embedding_pass).",
    ["where"],
)


def embeddings_observe(*, count: int, seconds: float) -> None:
    """Count one batch of memories embedded and the time the model took."""
    embedded_memories.inc(count)
    embedding_seconds.inc(seconds)


def keyword_fallback_observe(*, where: str) -> None:
    """Count one ranking (or embedding pass) that went without vectors."""
    keyword_fallbacks.labels(where).inc()


def sweep_observe(*, scope: str, retracted: int) -> None:
    """Count one finished sweep and the memories it retracted."""
    sweeps.labels(scope).inc()
    if retracted:
        retractions.inc(retracted)


def sweep_busy_observe(*, scope: str) -> None:
    """Count a sweep not run: another sweeper held the lease."""
    sweeps_busy.labels(scope).inc()


def extractions_observe(*, verdicts: Iterable[tuple[str, str]]) -> None:
    """Count a batch's extraction attempts by (outcome, reason), as written to the log."""
    for (outcome, reason), count in collections.Counter(verdicts).items():
        extractions.labels(outcome, reason).inc(count)


def injection_observe(*, user_memories: int, project_memories: int) -> None:
    """Count one injection and the memories it put in front of the prompt."""
    injections.inc()
    if user_memories:
        injected_memories.labels("user").inc(user_memories)
    if project_memories:
        injected_memories.labels("project").inc(project_memories)


_redactions_by_rule: dict[str, Any] = {}


def redaction_observe(*, rule_ids: list[str]) -> None:
    """Count one redactor call and each secret it replaced (per call, never per character).

    Each rule's child counter is looked up once per process: `labels()` costs microseconds.
    """
    redaction_calls.inc()
    for rule_id in rule_ids:
        child = _redactions_by_rule.get(rule_id)
        if child is None:
            child = _redactions_by_rule[rule_id] = redactions.labels(rule_id)
        child.inc()
