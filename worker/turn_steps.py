"""One claimed task's turn, step by step: the worker loop's half that runs a task.

`run_one` takes a claim to its end: refused (no quota, a repository that cannot be opened),
or prepared (memories injected into an in-memory copy of the prompt), executed under the
task's heartbeat, its changes stored (`worker.workspace_steps`), finished (the result and its
ledger row, retried while the database is unreachable) and its citations recorded; or
re-queued after a second signal, or discarded when another worker took the task over.

`TurnSteps` is a part of `worker.loop.Worker` (which holds the state these steps read: the
executor, the worker id, the stop flags, the outage, the workspace steps); it logs as
`worker.loop`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from automemory.services import feedback, injector
from automemory.services.injector import InjectionPreferences
from automemory.services.task_keys import task_state_store
from controlplane import selectors
from controlplane.logging import log_context
from controlplane.models import Task
from worker import faults, metrics, services
from worker.executors import ExecutionControl, ExecutionRequest, ExecutionResult, Executor
from worker.executors.base import RunHolder, TokenUsage
from worker.reports import RunReport
from worker.threads import Heartbeat
from worker.workspace import Workspace, workspace_close, workspace_code_view
from worker.workspace.checkouts import TurnChanges
from worker.workspace_steps import TaskLost, WorkspaceSteps

logger = logging.getLogger("worker.loop")


class TurnSteps:
    """Run one claimed task's turn (`run_one`) and its steps; mixed into `Worker`."""

    # What these steps read of the worker (set by `Worker.__init__`).
    executor: Executor
    worker_id: str
    actor_label: str
    heartbeat_seconds: float
    progress_log_seconds: float
    finish_retry_seconds: float
    workspaces: WorkspaceSteps
    aborting: bool
    _outage: faults.Outage
    _control: ExecutionControl | None
    _claimed_at: datetime | None

    def run_one(self, claim: services.Claim) -> RunReport:
        """Run one claimed task to its end (completed, failed, refused or re-queued)."""
        task = claim.task
        with log_context(task_id=task.pk):
            logger.info(
                "task %s turn %s%s: started (executor %s, user %s, project %s)",
                task.pk,
                task.turn,
                " (resume)" if task.is_resume else "",
                self.executor.name,
                task.user_id,
                task.project_id,
            )
            started = time.monotonic()
            outcome, reason = self._run_claimed(claim)
            seconds = time.monotonic() - started
            logger.info(
                "task %s turn %s%s: %s in %.2fs%s",
                task.pk,
                task.turn,
                " (resume)" if task.is_resume else "",
                outcome,
                seconds,
                f" ({reason[:200]})" if reason else "",
            )
        return RunReport(
            task_id=task.pk, turn=task.turn, outcome=outcome, seconds=seconds, reason=reason
        )

    def record_citations(self, task: Task, result: ExecutionResult) -> None:
        """Count the memories the result's `Memories used:` line names (no statement when it
        has none); a failure is logged, and the task's result stands."""
        try:
            feedback.citations_record(task=task, result_text=result.result_text)
        except Exception:
            logger.warning("task %s: its citations could not be recorded", task.pk, exc_info=True)

    def prepare(
        self,
        task: Task,
        *,
        preferences: InjectionPreferences | None = None,
        memory_key: str = "",
        unstored_key_hash: str = "",
        workspace: Workspace | None = None,
    ) -> ExecutionRequest:
        """The in-memory request for this turn, with memories injected by the injector.

        `thread_usage` is what the ledger recorded for earlier runs of the task's agent thread
        (None when nothing is), so an executor whose agent reports thread-cumulative usage
        can bill this turn its own part only. `preferences`: the task's injection
        preferences as the claim read them (else the injector reads them). `memory_key`: the
        memory tool key the claim minted for this turn; `unstored_key_hash`, its hash when the
        claim did not store it (SQLite): the injection's transaction stores it with the
        injected ids, else one upsert here does. `workspace`: the task's checkout, whose
        mirror and base commit memories citing code are checked against.
        """
        thread_usage = selectors.thread_usage_get(task_id=task.pk, thread_id=task.thread_id)
        request = ExecutionRequest(
            task_id=task.pk,
            project_id=task.project_id,
            user_id=task.user_id,
            prompt=task.prompt,
            goal=task.goal,
            turn=task.turn,
            is_resume=task.is_resume,
            kind=task.kind,
            parent_task_id=task.parent_task_id,
            thread_id=task.thread_id,
            continuation_prompt=task.continuation_prompt,
            thread_usage=TokenUsage(**thread_usage) if thread_usage is not None else None,
            memory_key=memory_key,
        )
        try:
            injected = injector.inject_memories(
                task=task,
                prompt=task.prompt,
                goal=task.goal,
                actor_label=self.actor_label,
                preferences=preferences,
                code=workspace_code_view(workspace),
                key_hash=unstored_key_hash,
            )
        except Exception as exc:
            if faults.is_connection_error(exc):
                raise  # the database is gone: the whole preparation is tried again
            logger.warning(
                "task %s: memory injection failed (%s: %s); running without memories",
                task.pk,
                type(exc).__name__,
                exc,
            )
            injected = None
        if unstored_key_hash and (injected is None or not injected.key_stored):
            task_state_store(
                task_id=task.pk, key_hash=unstored_key_hash, claimed_at=task.claimed_at
            )
        if injected is None:
            return request
        return replace(request, prompt=injected.prompt, goal=injected.goal)

    def _run_claimed(self, claim: services.Claim) -> tuple[str, str]:
        task = claim.task
        workspace = None
        try:
            try:
                refusal = services.task_claim_refusal(claim=claim)
                if not refusal:
                    workspace, failure = self.workspaces.open(task)
                    refusal = ("repository", failure) if failure else None
                if refusal:
                    kind, reason = refusal
                    self._while_unreachable(
                        lambda: services.task_refuse(
                            task=task, worker_id=self.worker_id, reason=reason, kind=kind
                        )
                    )
                    return "refused", reason
                # Nothing has run yet: while the database is gone, the preparation waits.
                request = self._while_unreachable(
                    lambda: self.prepare(
                        task,
                        preferences=claim.preferences,
                        memory_key=claim.memory_key,
                        unstored_key_hash=claim.unstored_key_hash,
                        workspace=workspace,
                    )
                )
            except faults.GaveUp:
                reason = "database unreachable before the agent ran; recovered once stale"
                logger.error("task %s: %s", task.pk, reason)
                return "unrecorded", reason
            except TaskLost:
                return "discarded", "the task was recovered by another worker before it ran"
            if workspace is not None:
                request = replace(request, checkout=workspace.checkout)
            return self._run_prepared(task, request, workspace)
        finally:
            if workspace is not None:
                workspace_close(workspace)

    def _run_prepared(
        self, task: Task, request: ExecutionRequest, workspace: Workspace | None
    ) -> tuple[str, str]:
        if self.aborting:
            self._requeue(task, reason="worker stopped at once")
            return "requeued", ""
        self._claimed_at = task.claimed_at
        result, lost = self._execute(request)
        if self.aborting:
            self._requeue(task, reason="worker stopped at once")
            return "requeued", ""
        turn_changes = None
        if workspace is not None and not lost:
            try:
                result, turn_changes = self.workspaces.store(task, workspace, result)
            except TaskLost:
                lost = True
        if lost:
            return "discarded", "the task was recovered by another worker while it ran"
        outcome = self._finish(task, result, turn_changes)
        if outcome != "finished":
            return outcome, self._finish_reasons[outcome]
        if result.status == "completed":
            self.record_citations(task, result)
        return result.status, result.failure_reason

    _finish_reasons = {
        "discarded": "the task was no longer held by this worker",
        "unrecorded": "the database stayed unreachable; the result was dropped",
    }

    def _finish(
        self, task: Task, result: ExecutionResult, turn_changes: TurnChanges | None = None
    ) -> str:
        """Record the turn's result: `finished`, `discarded` (the task is no longer held) or
        `unrecorded`.

        While the database is unreachable the result is kept in memory and the finish (with
        its ledger row) retried with back-off for up to `finish_retry_seconds`; every attempt
        is the same fenced statement (held by this worker under the same claim), so a task
        that was really taken over meanwhile is not written twice. All attempts carry the
        same `finished_at`: a retry that finds the task no longer running looks for its own
        run, in case the attempt whose reply was lost did commit.
        """
        now = timezone.now()
        started = time.monotonic()
        attempts = 0

        def attempt() -> bool:
            nonlocal attempts
            attempts += 1
            finished = services.task_finish(
                task=task,
                worker_id=self.worker_id,
                result=result,
                now=now,
                turn_changes=turn_changes,
            )
            if not finished and attempts > 1:
                return services.task_finish_recorded(task=task, worker_id=self.worker_id, now=now)
            return finished

        try:
            finished = self._while_unreachable(attempt)
        except faults.GaveUp:
            logger.error(
                "task %s turn %s: its result could not be recorded in %.0fs (database "
                "unreachable); it is dropped, and the task runs again once stale",
                task.pk,
                task.turn,
                time.monotonic() - started,
            )
            metrics.finish_retries.labels("dropped").inc()
            return "unrecorded"
        if attempts > 1:
            metrics.finish_retries.labels("recorded" if finished else "not_held").inc()
            logger.warning(
                "finish of task %s turn %s %s after %.1fs and %d attempts",
                task.pk,
                task.turn,
                "recorded" if finished else "not written: the task is no longer held",
                time.monotonic() - started,
                attempts,
            )
        return "finished" if finished else "discarded"

    def _while_unreachable(self, action):
        """`action()`, retried while the database is unreachable (`faults`), for up to
        `finish_retry_seconds`; a second signal stops the retries."""
        return faults.retry_while_unreachable(
            action,
            outage=self._outage,
            seconds=self.finish_retry_seconds,
            should_stop=lambda: self.aborting,
        )

    def _execute(self, request: ExecutionRequest) -> tuple[ExecutionResult, bool]:
        claimed_at = self._claimed_at  # the claim's fence, checked by every write while it runs
        control = ExecutionControl(
            on_thread_id=lambda thread_id: services.task_thread_record(
                task_id=request.task_id,
                worker_id=self.worker_id,
                thread_id=thread_id,
                claimed_at=claimed_at,
            ),
            holder=RunHolder(
                task_id=request.task_id,
                worker_id=self.worker_id,
                turn=request.turn,
                claimed_at=claimed_at,
            ),
        )
        self._control = control
        try:
            with Heartbeat(
                task_id=request.task_id,
                worker_id=self.worker_id,
                claimed_at=claimed_at,
                interval=self.heartbeat_seconds,
                control=control,
                progress_seconds=self.progress_log_seconds,
                turn=request.turn,
            ) as heartbeat:
                try:
                    result = self.executor.execute(request, control=control)
                except Exception as exc:
                    logger.exception(
                        "executor %s raised on task %s", self.executor.name, request.task_id
                    )
                    result = ExecutionResult.failed(
                        f"executor {self.executor.name} error: {type(exc).__name__}: {exc}"
                    )
        finally:
            self._control = None
        return result, heartbeat.lost

    def _requeue(self, task: Task, *, reason: str) -> None:
        try:
            services.task_requeue(task=task, worker_id=self.worker_id, reason=reason)
        except Exception:
            logger.exception(
                "could not re-queue task %s; it will be recovered once its heartbeat is stale",
                task.pk,
            )
