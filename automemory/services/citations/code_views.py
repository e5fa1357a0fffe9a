"""The code a citation check reads in the API process (`memory_search`, the preview, a
memory written by hand): the control plane's own mirror of the project's repository
(`controlplane.services.mirrors`), fetched when it lacks what is asked for, at most once a
minute per repository and process (`AUTOMEMORY_CITATION_MIRROR_REFRESH_SECONDS`). When it
cannot be read or fetched, the view says why and its citations stay `unchecked` (never
presented as fresh)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from automemory import conf
from automemory.services.citations.gate import CodeView
from controlplane.credentials import CredentialUnreadable
from controlplane.git import GitError
from controlplane.models import Repository, Task
from controlplane.services.mirrors import (
    MirrorError,
    branch_head_resolve,
    commit_present,
    mirror_fetch,
    mirror_path,
)

logger = logging.getLogger(__name__)

_fetched_at: dict[Path, float] = {}
_lock = threading.Lock()


def mirror_ready(repository: Repository, *, refresh: bool) -> tuple[Path | None, str]:
    """The mirror's path and "" (fetched first when it is missing, or when `refresh` and the
    last fetch of this process is over a minute old); (None, why) when there is none."""
    path = mirror_path(repository)
    present = (path / "HEAD").is_file()
    every = float(conf.get("CITATION_MIRROR_REFRESH_SECONDS"))
    with _lock:
        fetched = _fetched_at.get(path)
    recent = fetched is not None and time.monotonic() - fetched < every
    if present and (recent or not refresh):
        return path, ""
    try:
        path = mirror_fetch(repository)
    except (MirrorError, CredentialUnreadable, GitError, OSError) as exc:
        logger.warning("the mirror of repository %s could not be fetched: %s", repository.pk, exc)
        if present:
            return path, ""
        return None, f"the repository could not be fetched: {exc}"
    with _lock:
        _fetched_at[path] = time.monotonic()
    return path, ""


def view_for_branch(project_id: int, branch: str | None) -> CodeView | None:
    """The code a new task on `branch` (the default branch when None) would start from: that
    branch's head now. None for a project without a repository."""
    repository = Repository.objects.filter(project_id=project_id).first()
    if repository is None:
        return None
    branch = branch or repository.default_branch
    git_dir, why = mirror_ready(repository, refresh=True)
    head = branch_head_resolve(git_dir, branch) if git_dir is not None else None
    if git_dir is not None and head is None:
        git_dir, why = None, f"branch {branch!r} is not in the repository"
    return CodeView(git_dir, head or "", branch, repository.default_branch, unavailable=why)


def view_for_task(task: Task) -> CodeView | None:
    """The code `task` started from (its `base_commit`), for its memory tool's search."""
    repository = Repository.objects.filter(project_id=task.project_id).first()
    if repository is None:
        return None
    if not task.base_commit:
        return view_for_branch(task.project_id, task.branch or None)
    git_dir, why = mirror_ready(repository, refresh=False)
    if git_dir is not None and not commit_present(git_dir, task.base_commit):
        git_dir, why = mirror_ready(repository, refresh=True)
        if git_dir is not None and not commit_present(git_dir, task.base_commit):
            git_dir, why = None, f"commit {task.base_commit[:12]} is not in the repository"
    branch = task.branch or repository.default_branch
    return CodeView(git_dir, task.base_commit, branch, repository.default_branch, unavailable=why)
