"""Every task of a project with a repository runs in a worktree of its own, on any host.

What the worker loop calls, in order (`worker.loop`):
1. `workspace_open(task)` before the agent starts: the mirror fetched (with a timeout; the
   repository's reachability recorded), the task's branch resolved to its base commit on
   its first turn, its branch from earlier turns restored (from the remote or a stored
   bundle) and a fresh worktree checked out at the turn's start commit. Any failure is a
   `WorkspaceError` whose message names the remote and says why: the task fails before
   anything ran or was billed.
2. `workspace_turn_store(...)` after the agent exited: what it changed committed onto
   `controlplane/task-<id>` and stored (`worker.workspace.branches`), with the branch's diff
   against the base; None when the turn changed nothing (nothing is stored).
3. `workspace_close(...)`: the worktree and the task's git folder removed, or kept
   `WORKER_WORKTREE_KEEP_HOURS` for debugging. `workspace_cleanup()` (at start-up and now
   and then) removes what a killed worker left and what outlived its hours.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.conf import settings

from automemory.services.citations.gate import CodeView
from controlplane.credentials import CredentialUnreadable
from controlplane.git import GitError, Remote
from controlplane.models import Repository, Task
from controlplane.services.mirrors import (
    MirrorError,
    branch_head_resolve,
    commit_present,
    mirror_fetch,
    repository_remote,
)
from controlplane.services.repositories import repository_reach_record
from worker.sandbox import TaskCheckout
from worker.workspace.branches import BranchError, branch_restore, branch_store
from worker.workspace.checkouts import (
    CheckoutError,
    TaskPaths,
    TurnChanges,
    branch_diff,
    git_dir_ensure,
    task_files_remove,
    task_locked,
    task_paths,
    turn_commit,
    worktree_create,
)

logger = logging.getLogger(__name__)


class WorkspaceError(Exception):
    """The task's workspace could not be prepared or its turn kept; the message says why."""


@dataclass
class Workspace:
    """A task's checkout on this host for one turn, its lock held until `workspace_close`."""

    task_id: int
    repository: Repository
    remote: Remote = field(repr=False)
    mirror: Path
    paths: TaskPaths
    branch: str
    base_commit: str
    start_commit: str
    # True when the base commit was resolved now (the first turn): the caller records it.
    base_resolved: bool
    _lock: contextlib.ExitStack = field(repr=False)

    @property
    def checkout(self) -> TaskCheckout:
        return TaskCheckout(objects=(self.paths.git_dir / "objects", self.mirror / "objects"))


def workspace_code_view(workspace: Workspace | None) -> CodeView | None:
    """The code the task starts from, as the injection checks memories citing code against
    it: the mirror and the base commit (None for a task without a repository)."""
    if workspace is None:
        return None
    return CodeView(
        git_dir=workspace.mirror,
        commit=workspace.base_commit,
        branch=workspace.branch,
        default_branch=workspace.repository.default_branch,
    )


def workspace_open(task: Task) -> Workspace | None:
    """The task's workspace, ready for its agent; None for a task without a repository (it
    runs as it always did). WorkspaceError says why it cannot be made."""
    if not task.branch:
        return None
    repository = Repository.objects.filter(project_id=task.project_id).first()
    if repository is None:
        raise WorkspaceError(
            f"the project's repository was removed; the task's branch {task.branch!r} "
            "cannot be checked out"
        )
    started = time.monotonic()
    paths = task_paths(task_id=task.pk)
    lock = contextlib.ExitStack()
    lock.enter_context(task_locked(paths))
    try:
        workspace = _prepare(task, repository, paths, lock)
    except BaseException:
        with contextlib.suppress(Exception):
            task_files_remove(paths)
        lock.close()
        raise
    logger.info(
        "task %s turn %s: worktree at %s from %s (%s) in %.2fs",
        task.pk,
        task.turn,
        workspace.start_commit[:12],
        repository.url,
        task.branch,
        time.monotonic() - started,
    )
    return workspace


def _prepare(task: Task, repository: Repository, paths: TaskPaths, lock) -> Workspace:
    try:
        remote = repository_remote(repository)
        mirror = mirror_fetch(repository, remote=remote)
    except (MirrorError, CredentialUnreadable) as exc:
        repository_reach_record(repository_id=repository.pk, error=str(exc))
        raise WorkspaceError(str(exc)) from None
    repository_reach_record(repository_id=repository.pk, error="")
    base, resolved = task.base_commit, False
    try:
        if not base:
            base = branch_head_resolve(mirror, task.branch) or ""
            if not base:
                raise WorkspaceError(f"branch {task.branch!r} is not on {repository.url}")
            resolved = True
        git_dir_ensure(paths, mirror=mirror)
        start = task.head_commit or base
        if start == base and not commit_present(paths.git_dir, base):
            raise WorkspaceError(
                f"base commit {base} of branch {task.branch!r} is no longer on "
                f"{repository.url} (was it force-pushed?)"
            )
        if start != base:
            branch_restore(paths, remote=remote, head=start)
        worktree_create(paths, mirror=mirror, start=start, base=base, branch=task.branch)
    except (BranchError, CheckoutError, GitError) as exc:
        raise WorkspaceError(f"the task's worktree could not be prepared: {exc}") from None
    return Workspace(
        task_id=task.pk,
        repository=repository,
        remote=remote,
        mirror=mirror,
        paths=paths,
        branch=task.branch,
        base_commit=base,
        start_commit=start,
        base_resolved=resolved,
        _lock=lock,
    )


def workspace_turn_store(
    workspace: Workspace, *, turn: int, worker_id: str, claimed_at: datetime | None
) -> TurnChanges | None:
    """Commit and keep what the turn changed; None when it changed nothing (nothing is
    stored). WorkspaceError when it could not be kept (the turn's changes are then lost;
    the task's head stays where the previous turn left it)."""
    paths = workspace.paths
    try:
        head = turn_commit(
            paths,
            start=workspace.start_commit,
            message=f"Task {workspace.task_id}, turn {turn}",
        )
        if head is None:
            return None
        diff = branch_diff(paths, base=workspace.base_commit, head=head)
        stored = branch_store(
            paths,
            remote=workspace.remote,
            base=workspace.base_commit,
            head=head,
            turn=turn,
            worker_id=worker_id,
            claimed_at=claimed_at,
        )
    except (BranchError, CheckoutError, GitError) as exc:
        raise WorkspaceError(f"the turn's changes could not be kept: {exc}") from None
    logger.info(
        "task %s turn %s: %d files changed, branch at %s (%s)",
        workspace.task_id,
        turn,
        diff.files_changed,
        head[:12],
        stored,
    )
    return TurnChanges(base_commit=workspace.base_commit, head_commit=head, diff=diff)


def workspace_close(workspace: Workspace) -> None:
    """Remove the task's checkout from this host, or mark it ended and keep it
    `WORKER_WORKTREE_KEEP_HOURS`; release its lock."""
    try:
        if settings.WORKER_WORKTREE_KEEP_HOURS > 0:
            workspace.paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            workspace.paths.ended.touch()
        else:
            task_files_remove(workspace.paths)
    except OSError:
        logger.warning(
            "task %s: its worktree could not be removed", workspace.task_id, exc_info=True
        )
    finally:
        workspace._lock.close()
