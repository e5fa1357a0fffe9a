"""What a killed worker left in the repository cache, and what outlived its hours.

A task's checkout whose lock nobody holds and that has no `ended` mark belonged to a turn
whose worker died: it goes (the turn runs again from the last stored state). One with an
`ended` mark goes once WORKER_WORKTREE_KEEP_HOURS have passed. A checkout in use (its lock
held by a worker of this host) is never touched.
"""

from __future__ import annotations

import logging
import re
import time

from django.conf import settings

from controlplane.services.mirrors import cache_root
from worker.workspace.checkouts import task_files_remove, task_locked, task_paths

logger = logging.getLogger(__name__)

_TASK_FOLDER = re.compile(r"^task-(\d+)$")


def workspace_cleanup(*, now: float | None = None) -> list[int]:
    """Remove orphaned and expired task checkouts of this host; the task ids removed."""
    now = time.time() if now is None else now
    keep_seconds = settings.WORKER_WORKTREE_KEEP_HOURS * 3600
    removed = []
    folder = cache_root() / "tasks"
    if not folder.is_dir():
        return removed
    for entry in sorted(folder.iterdir()):
        match = _TASK_FOLDER.match(entry.name)
        if match is None:
            continue
        paths = task_paths(task_id=int(match.group(1)))
        with task_locked(paths, wait=False) as held:
            if not held:
                continue  # a worker of this host runs it now
            if paths.ended.exists():
                if now - paths.ended.stat().st_mtime < keep_seconds:
                    continue
                why = "kept hours over"
            elif paths.root.exists():
                why = "left by a worker that stopped mid-turn"
            else:
                continue
            task_files_remove(paths)
            removed.append(paths.task_id)
            logger.info("task %s: its worktree removed (%s)", paths.task_id, why)
    return removed
