"""The worker loop's steps for a task's worktree: made before the agent runs, its turn kept
after, both under the task's heartbeat (a fetch or a push can take a while), and the
host's clean-up of what killed workers left (`worker.workspace` does the git work)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from controlplane.models import Task
from worker import faults, services
from worker.executors import ExecutionControl, ExecutionResult
from worker.threads import Heartbeat
from worker.workspace import (
    Workspace,
    WorkspaceError,
    workspace_close,
    workspace_open,
    workspace_turn_store,
)
from worker.workspace.checkouts import TurnChanges
from worker.workspace.cleanup import workspace_cleanup

logger = logging.getLogger("worker.loop")

# How often a running worker removes task checkouts that outlived WORKER_WORKTREE_KEEP_HOURS
# or that a killed worker of this host left (it also does at start-up).
CLEANUP_SECONDS = 600.0


class TaskLost(Exception):
    """The task was taken over by another worker while this one prepared or stored it."""


class WorkspaceSteps:
    """Bound to a worker: its id, its heartbeat interval, and its way of waiting out a
    database outage (`Worker._while_unreachable`)."""

    def __init__(
        self, *, worker_id: str, heartbeat_seconds: float, while_unreachable: Callable
    ) -> None:
        self.worker_id = worker_id
        self.heartbeat_seconds = heartbeat_seconds
        self.while_unreachable = while_unreachable
        self._next_cleanup = 0.0

    def open(self, task: Task) -> tuple[Workspace | None, str]:
        """The task's worktree (None without a repository), or why it cannot be made; its
        first turn's base commit recorded. TaskLost when the task was taken over."""
        if not task.branch:
            return None, ""
        with self._heartbeat(task) as heartbeat:
            try:
                workspace = self.while_unreachable(lambda: workspace_open(task))
            except WorkspaceError as exc:
                return None, str(exc)
            except faults.GaveUp:
                raise
            except Exception as exc:
                logger.exception("task %s: its worktree could not be prepared", task.pk)
                return None, f"the task's worktree could not be prepared: {type(exc).__name__}"
        if heartbeat.lost:
            workspace_close(workspace)
            raise TaskLost
        if workspace.base_resolved:
            recorded = self.while_unreachable(
                lambda: services.task_base_record(
                    task_id=task.pk,
                    worker_id=self.worker_id,
                    base_commit=workspace.base_commit,
                    claimed_at=task.claimed_at,
                )
            )
            if not recorded:
                workspace_close(workspace)
                raise TaskLost
            task.base_commit = workspace.base_commit
        return workspace, ""

    def store(
        self, task: Task, workspace: Workspace, result: ExecutionResult
    ) -> tuple[ExecutionResult, TurnChanges | None]:
        """Commit and keep what the turn changed; a turn whose changes could not be kept
        fails, saying why (its agent's usage is billed as it ran). TaskLost when the task
        was taken over meanwhile."""
        with self._heartbeat(task) as heartbeat:
            try:
                turn_changes = workspace_turn_store(
                    workspace, turn=task.turn, worker_id=self.worker_id, claimed_at=task.claimed_at
                )
            except WorkspaceError as exc:
                logger.warning("task %s turn %s: %s", task.pk, task.turn, exc)
                return replace(result, status="failed", failure_reason=str(exc)), None
        if heartbeat.lost:
            raise TaskLost
        return result, turn_changes

    def clean(self, *, force: bool = False) -> list[int]:
        """Remove the task checkouts of this host that a killed worker left, or that outlived
        WORKER_WORKTREE_KEEP_HOURS (at most every CLEANUP_SECONDS unless `force`); a failure
        is logged, never raised."""
        if not force and time.monotonic() < self._next_cleanup:
            return []
        self._next_cleanup = time.monotonic() + CLEANUP_SECONDS
        try:
            return workspace_cleanup()
        except Exception:
            logger.warning("could not clean the repository cache's worktrees", exc_info=True)
            return []

    def _heartbeat(self, task: Task) -> Heartbeat:
        return Heartbeat(
            task_id=task.pk,
            worker_id=self.worker_id,
            claimed_at=task.claimed_at,
            interval=self.heartbeat_seconds,
            control=ExecutionControl(),
            turn=task.turn,
        )
