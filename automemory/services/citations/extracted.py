"""Citations of auto memories, checked against the code of the task they come from.

Where they come from: the extraction model's answer (`citations` in its strict schema), or,
for the deterministic text, the task's diff: each changed file (not deleted) that the
memory's text names, by its path or its file name, is cited at the lines of the diff's
first hunk in that file (its new side: what the task wrote there), at most
`MAX_CITED_LINES` lines. Each is checked against the task's `head_commit`; one that does
not hold there is dropped, and the log's detail says which and why.

The head commit is read in this host's mirror of the repository; the task's own branch
(`controlplane/task-<id>`) is fetched into it when the mirror lacks the commit (a branch
kept as a bundle in storage is not: its memory then cites nothing, and the log says so).
A memory drawn from a task on a branch other than the default is scoped to that branch
(`store.branch_scope_set`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PurePosixPath

from automemory.models.citations import MAX_CITATIONS_PER_MEMORY, MAX_CITED_LINES
from automemory.services.citations import code_views
from automemory.services.citations.anchors import (
    CitationRefused,
    TaskCitations,
    anchors_check,
)
from controlplane.git import GitError
from controlplane.models import Repository, Task, TaskDiff
from controlplane.repository_urls import TASK_BRANCH_PREFIX
from controlplane.services.mirrors import (
    LOCAL_TIMEOUT_SECONDS,
    MirrorError,
    commit_present,
    remote_fetch,
    repository_remote,
)

logger = logging.getLogger(__name__)

HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def task_citations(task: Task, proposed: list[dict] | None, *, content: str) -> TaskCitations:
    """The citations the task's memory gets: `proposed` (the model's), or from the task's
    diff when None (the deterministic text), each checked against the task's head commit.
    Never raises: what cannot be checked is dropped and said."""
    found = TaskCitations()
    repository = Repository.objects.filter(project_id=task.project_id).first()
    if repository is None or not task.head_commit:
        if proposed:
            found.dropped.append("the task has no commit to cite")
        return found
    found.branch = task.branch or repository.default_branch
    found.default_branch = repository.default_branch
    found.head = task.head_commit
    if proposed is None:
        proposed = diff_citations(task, content=content)
    if len(proposed) > MAX_CITATIONS_PER_MEMORY:
        found.dropped.append(f"more than {MAX_CITATIONS_PER_MEMORY} citations: the rest")
        proposed = proposed[:MAX_CITATIONS_PER_MEMORY]
    if not proposed:
        return found
    try:
        git_dir = _head_readable(repository, task)
        # Written on the task's own branch: until it is merged, a base without its lines is
        # not stale code (`checks`: unmerged).
        checked = anchors_check(
            proposed, git_dir=git_dir, commit=task.head_commit, branch=_task_branch(task)
        )
    except (GitError, MirrorError, OSError) as exc:
        logger.warning("task %s: its citations could not be checked: %s", task.pk, exc)
        found.dropped.append(f"the task's code could not be read ({exc})")
        return found
    for citation, item in zip(proposed, checked, strict=True):
        if isinstance(item, CitationRefused):
            found.dropped.append(f"{str(citation.get('path'))[:200]!r} {item.message}")
        else:
            found.anchors.append(item)
    return found


def _head_readable(repository: Repository, task: Task) -> Path:
    """The mirror, holding the task's head commit (its branch fetched when it did not)."""
    git_dir, why = code_views.mirror_ready(repository, refresh=False)
    if git_dir is None:
        raise MirrorError(why)
    if commit_present(git_dir, task.head_commit):
        return git_dir
    remote = repository_remote(repository)
    branch = _task_branch(task)
    remote_fetch(
        git_dir,
        remote,
        [f"+refs/heads/{branch}:refs/cited/{branch}"],
        timeout=LOCAL_TIMEOUT_SECONDS,
        check=False,
    )
    if not commit_present(git_dir, task.head_commit):
        raise MirrorError(f"commit {task.head_commit[:12]} is not on the remote")
    return git_dir


def _task_branch(task: Task) -> str:
    return f"{TASK_BRANCH_PREFIX}task-{task.pk}"


def diff_citations(task: Task, *, content: str) -> list[dict]:
    """The task's changed files (not deleted) that `content` names, by path or by a file
    name of at least 4 characters, each at its first hunk's new lines (see the module)."""
    named = []
    for changed in task.changed_files or []:
        path = changed.get("path") if isinstance(changed, dict) else None
        if not path or changed.get("status") == "deleted":
            continue
        name = PurePosixPath(path).name
        if path in content or (len(name) >= 4 and re.search(rf"\b{re.escape(name)}\b", content)):
            named.append(path)
    if not named:
        return []
    diff = TaskDiff.objects.filter(task_id=task.pk).values_list("diff", flat=True).first() or ""
    citations = []
    for path in named:
        lines = _first_hunk(diff.encode(), path)
        if lines is not None:
            citations.append({"path": path, "start_line": lines[0], "end_line": lines[1]})
    return citations


def _first_hunk(diff: bytes, path: str) -> tuple[int, int] | None:
    """The new-side line range of the first hunk of `path` in a unified diff, or None."""
    at = -1
    for marker in (f"+++ b/{path}\n".encode(), f"+++ b/{path}\t\n".encode()):
        at = diff.find(marker)
        if at >= 0:
            at += len(marker)
            break
    if at < 0:
        return None
    found = HUNK.search(diff, at)
    following = diff.find(b"\ndiff --git ", at)
    if found is None or (following >= 0 and found.start() > following):
        return None
    start, count = int(found.group(1)), int(found.group(2) or 1)
    if count == 0:
        return None
    return start, start + min(count, MAX_CITED_LINES) - 1
