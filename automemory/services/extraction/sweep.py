"""The extraction sweep: completed, idle tasks become project memories. The pipeline, in order
(one module per phase, each called once for the batch or once per task):

1. lease          one sweeper at a time (`lease`): the global lease, or the user's own;
2. candidates     tasks changed since the cursor, and the retry set (`candidates`), each read
                  once with everything the phases need (settings, switch, events, injected
                  memories, kept draft, goal key);
3. retraction     a memory whose task saw external context after it was written is withdrawn;
4. gates          switch, idle, duration and length, external context, quota (`gates`);
5. privacy read   what a project memory of the task must never hold, and consent; a task
                  whose injected memories can no longer be checked is skipped (`privacy`);
   then for each task that passed (`_extract`):
6. drafting       the memory's text, by the model or the deterministic strategy (`drafting`);
7. privacy        the draft holds no user-level memory's text (`privacy`);
8. consolidation  how it joins the project's memories, by the consolidation model;
9. writing        the memory, its provenance and its log row, in one transaction (`writing`);
10. log           every other verdict in one upsert (`log`); the cursor moves on (`cursor`).

A worker runs the global sweep from its sweeper thread (`GlobalSweeper`), never inside a
round that claims tasks, so no claim waits for a model. The run endpoint and
`manage.py run_auto_memory --user` run one user's sweep (`process_auto_memories(user=...)`).
"""

import logging
import time
from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from automemory import conf, metrics
from automemory.models import Outcome, Reason, SweepState
from automemory.services import retention, vectors
from automemory.services.citations import revalidation
from automemory.services.citations.extracted import task_citations
from automemory.services.extraction.candidates import (
    Candidate,
    CandidateRead,
    candidate_inputs_read,
    global_candidates_read,
    user_candidates_read,
)
from automemory.services.extraction.consolidation import consolidation_decision
from automemory.services.extraction.cursor import Point, cursor_advance
from automemory.services.extraction.drafting import NoDurableSignal, memory_draft
from automemory.services.extraction.gates import external_context_seen, gates_check
from automemory.services.extraction.lease import (
    GLOBAL,
    Lease,
    SweepBusy,
    holder_label,
    lease_keep,
    lease_wait,
    leases_release,
    user_lease_name,
    user_leases_take,
)
from automemory.services.extraction.log import SweepSummary, Verdict, log_rows_write, skipped
from automemory.services.extraction.privacy import (
    PrivateContent,
    private_content_check,
    private_texts_read,
)
from automemory.services.extraction.retraction import memory_retract
from automemory.services.extraction.writing import AlreadyExtracted, NewMemory, extraction_write
from automemory.services.llm import (
    MemoryBudgetExhausted,
    ModelCallCapReached,
    ModelOutputInvalid,
    ModelUnavailable,
    SweepModelCalls,
)
from automemory.services.provenance import PrivateTexts, injected_text_removed
from automemory.services.redactor import redact

logger = logging.getLogger(__name__)

__all__ = ["GlobalSweeper", "SweepBusy", "SweepSummary", "process_auto_memories"]


def process_auto_memories(
    *, user=None, force: bool = False, now: datetime | None = None
) -> SweepSummary | None:
    """Run one extraction sweep over completed tasks, of one user or of everyone.

    `force` skips the idle, duration and length gates (never the switch, external-context or
    quota gates). One user's sweep takes that user's lease, waiting up to
    `AUTOMEMORY_USER_SWEEP_WAIT_SECONDS` while the global sweep works on the user's tasks
    (`SweepBusy` after that). Everyone's sweep takes the global lease for this one sweep and
    returns None when another sweeper holds it. Never raises for one task's failure (it is
    logged).
    """
    if user is not None:
        lease = Lease(holder=holder_label(f"user sweep {user.pk}"))
        name = user_lease_name(user.pk)
        try:
            lease_wait(lease, name, seconds=conf.get("USER_SWEEP_WAIT_SECONDS"))
        except SweepBusy:
            metrics.sweep_busy_observe(scope="user")
            raise
        try:
            return _sweep(lease=lease, name=name, user_id=user.pk, force=force, now=now)
        finally:
            leases_release(lease)
    sweeper = GlobalSweeper(holder=holder_label("one-off sweep"))
    try:
        return sweeper.sweep(force=force, now=now)
    finally:
        sweeper.release()


class GlobalSweeper:
    """One process's sweeper of everyone's tasks, under the global lease.

    It keeps the lease from one sweep to the next (renewing it each time) and lets go in
    `release()`; a sweeper that does not hold it spends one statement per try. After a
    sweep, the holder also runs the retention pass when one is due.
    """

    def __init__(self, *, holder: str | None = None) -> None:
        self.lease = Lease(holder=holder or holder_label("sweeper"))
        self._retention_due_at = 0.0  # monotonic time of the next retention pass

    def sweep(
        self, *, force: bool = False, now: datetime | None = None, wait: float = 0
    ) -> SweepSummary | None:
        """One global sweep if this sweeper holds (or takes) the lease, waiting up to `wait`
        seconds for it; None when another sweeper holds it."""
        try:
            lease_wait(self.lease, GLOBAL, seconds=wait)
        except SweepBusy:
            metrics.sweep_busy_observe(scope="all")
            return None
        return _sweep(lease=self.lease, name=GLOBAL, user_id=None, force=force, now=now)

    def run(self, *, wait: float = 0) -> SweepSummary | None:
        """One turn of a worker's sweeper: the sweep (waiting up to `wait` seconds for the
        lease), the embedding pass (memories written or edited since get their vectors), the
        revalidation of memories whose cited code changed (`citations.revalidation`),
        then the retention pass when due (at most once per
        `AUTOMEMORY_RETENTION_INTERVAL_SECONDS`; a failed pass also waits)."""
        summary = self.sweep(wait=wait)
        if summary is None or not self.lease.held:
            return summary
        embedded = vectors.embeddings_refresh()
        if embedded.embedded:
            logger.info("embedded %s memories in %.2f s", embedded.embedded, embedded.seconds)
        # Memories whose cited code changed, revalidated by their author's model.
        revalidated = revalidation.stale_memories_revalidate(calls=SweepModelCalls())
        if revalidated.kept or revalidated.updated or revalidated.retired:
            logger.info("memories whose code changed: %s", revalidated)
        if time.monotonic() >= self._retention_due_at:
            self._retention_due_at = time.monotonic() + retention.retention_interval_seconds()
            retention.memories_archive_unused(now=timezone.now())  # logs what it archived
        return summary

    def stop(self) -> None:
        """Ask a sweep running in another thread to leave its remaining tasks (thread-safe)."""
        self.lease.stopping = True

    def release(self) -> None:
        """Let go of the lease (the worker stops), so the next sweeper need not wait."""
        leases_release(self.lease)


def _sweep(
    *, lease: Lease, name: str, user_id: int | None, force: bool, now: datetime | None
) -> SweepSummary:
    """The pipeline (see the module's docstring) under `lease`, which holds `name`."""
    now = now or timezone.now()
    summary = SweepSummary(forced=force)
    read = _candidates(name=name, user_id=user_id, now=now, force=force)
    candidates, waiting = read.candidates, []
    if user_id is None and candidates:
        # The users whose own sweep is running now are left for a later sweep.
        users = user_leases_take(lease, {c.task.user_id for c in candidates})
        waiting = [c for c in candidates if c.task.user_id not in users]
        candidates = [c for c in candidates if c.task.user_id in users]
    calls = SweepModelCalls()
    try:
        deferred = waiting + _process(
            candidates, lease=lease, calls=calls, now=now, force=force, summary=summary
        )
    finally:
        if user_id is None:
            leases_release(lease, lease.names - {GLOBAL})
    summary.model_calls += calls.used
    summary.deferred += len(deferred)
    if not cursor_advance(
        name,
        token=lease.token,
        read_at=read.read_at,
        stopped_at=read.stopped_at,
        hold=_cursor_hold(deferred),
    ):
        logger.warning("auto memory: sweep lease %s lost; the next holder reads on", name)
    metrics.sweep_observe(scope="all" if user_id is None else "user", retracted=summary.retracted)
    if summary.scanned or summary.deferred:
        logger.info(
            "auto memory sweep%s: scanned %d, extracted %d, superseded %d, retracted %d, "
            "skipped %s, errors %d, model calls %d, left for a later sweep %d",
            f" for user {user_id}" if user_id is not None else "",
            summary.scanned,
            summary.extracted,
            summary.superseded,
            summary.retracted,
            {k: v for k, v in summary.skipped.items() if v},
            summary.errors,
            summary.model_calls,
            summary.deferred,
        )
    return summary


def _candidates(*, name: str, user_id: int | None, now: datetime, force: bool) -> CandidateRead:
    batch_size = conf.get("SWEEP_BATCH_SIZE")
    read_at = timezone.now()
    if user_id is None:
        state = SweepState.objects.filter(name=GLOBAL).first()
        return global_candidates_read(
            state=state, now=now, force=force, limit=batch_size, read_at=read_at
        )
    states = list(SweepState.objects.filter(name__in=[GLOBAL, name]))
    return user_candidates_read(
        user_id=user_id, states=states, force=force, limit=batch_size * 2, read_at=read_at
    )


def _cursor_hold(deferred: Sequence[Candidate]) -> Point | None:
    """The point the cursor may not pass: just before the first task of the read of changed
    tasks that was left for a later sweep, so the next read sees it again."""
    changed = [candidate.task for candidate in deferred if candidate.changed]
    if not changed:
        return None
    first = min(changed, key=lambda task: (task.updated_at, task.pk))
    return first.updated_at, first.pk - 1


def _process(
    candidates: list[Candidate],
    *,
    lease: Lease,
    calls: SweepModelCalls,
    now: datetime,
    force: bool,
    summary: SweepSummary,
) -> list[Candidate]:
    """Take the candidates through the phases, in order; log each. Returns those left
    untouched (no log row written) for a later sweep: the model call cap, or the lease lost.

    Each phase is called once for the batch (candidates' inputs, retraction, gates, the
    privacy read, the log) or once per candidate (`_extract`), and is handed what the
    phases before it computed (on the candidate), never reading it again."""
    if not candidates:
        return []
    candidate_inputs_read(candidates)
    fresh = []
    for candidate in candidates:
        if not candidate.extracted_before:
            fresh.append(candidate)
        elif candidate.prefs.disable_on_external_context:
            seen = external_context_seen(candidate)
            if seen is not None and memory_retract(candidate.task, seen=seen, now=now, force=force):
                summary.retracted += 1
                summary.scanned += 1
    extractable, verdicts = gates_check(fresh, now=now, force=force)
    verdicts.update(private_texts_read(extractable))

    deferred = []
    for candidate in extractable:
        if candidate.task.pk in verdicts:
            continue
        verdict = _extract(candidate, lease=lease, calls=calls, now=now, force=force)
        if verdict is None:
            deferred.append(candidate)
        else:
            verdicts[candidate.task.pk] = verdict

    answered, with_drafts, observed = [], set(), []
    for candidate in fresh:
        verdict = verdicts.get(candidate.task.pk)
        if verdict is not None:
            answered.append((candidate.task, verdict, candidate.log))
            summary.count(verdict)
            if not verdict.written_elsewhere:
                observed.append((verdict.outcome, verdict.reason))
        if candidate.may_have_draft:
            with_drafts.add(candidate.task.pk)
    log_rows_write(answered, now=now, force=force, with_drafts=with_drafts)
    metrics.extractions_observe(verdicts=observed)
    return deferred


def _extract(
    candidate: Candidate, *, lease: Lease, calls: SweepModelCalls, now: datetime, force: bool
) -> Verdict | None:
    """Draft, check and write one task's memory: drafting, privacy, consolidation, the
    citations' check, writing.
    Its verdict, or None to leave it untouched for a later sweep (its model calls may not
    all fit under the sweep's cap, or the lease is lost). The lease is renewed when due
    before the task's model calls, so it outlasts them (`manage.py check` holds the lease's
    length against the model's timeouts)."""
    if lease.lost or lease.stopping or not lease_keep(lease):
        return None
    task = candidate.task
    private = candidate.private or PrivateTexts()
    try:
        draft = memory_draft(candidate, calls=calls)
        private_content_check(draft.content, private)
        new = NewMemory(task, draft.content, draft.keywords, held=candidate.held_for_author)
        decision = consolidation_decision(candidate, new, calls=calls)
        # The model's citations (None: from the task's diff), checked against the task's
        # head commit before the writer's transaction; its log says which were dropped.
        proposed = None if draft.citations is None else list(draft.citations)
        cited = task_citations(task, proposed, content=new.content)
        return extraction_write(
            new,
            key=candidate.goal_key,
            decision=decision,
            note="; ".join(filter(None, (draft.note, cited.note))),
            previous_log=candidate.log,
            now=now,
            force=force,
            discard_draft=candidate.may_have_draft,
            cited=cited,
        )
    except ModelCallCapReached:
        return None
    except NoDurableSignal as exc:
        return skipped(Reason.NO_DURABLE_SIGNAL, _cleaned(str(exc), private))
    except ModelUnavailable as exc:
        logger.warning("auto memory: task %s waits, memory model unavailable: %s", task.pk, exc)
        return skipped(Reason.MODEL_UNAVAILABLE, str(exc))
    except MemoryBudgetExhausted as exc:
        return skipped(Reason.MEMORY_BUDGET_EXHAUSTED, str(exc), retry_after=exc.retry_after)
    except ModelOutputInvalid as exc:
        logger.warning("auto memory: task %s: %s", task.pk, exc)
        # The message names what is wrong and the answer's size, never its text.
        return Verdict(Outcome.ERROR, Reason.MODEL_OUTPUT_INVALID, str(exc))
    except PrivateContent as exc:
        return skipped(Reason.PRIVATE_CONTENT, str(exc))
    except AlreadyExtracted as exc:
        # Another writer wrote (or merged) this task's memory first; its log row says how.
        return Verdict(Outcome.EXTRACTED, exc.reason, "", exc.memory_id, written_elsewhere=True)
    except Exception as exc:
        logger.exception("auto memory: extracting task %s failed", task.pk)
        return Verdict(
            Outcome.ERROR, Reason.ERROR, _cleaned(redact(f"{type(exc).__name__}: {exc}"), private)
        )


def _cleaned(detail: str, private: PrivateTexts) -> str:
    """A log detail without any private text, at most 1,000 characters."""
    return injected_text_removed(detail, fingerprints=private.fingerprints)[:1000]
