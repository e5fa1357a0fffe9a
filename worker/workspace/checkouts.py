"""A task's checkout on this host: its private git folder, its worktree, and the commit of
what a turn changed.

Layout (`WORKER_REPO_CACHE`):
- `tasks/task-<id>/git/`: a bare repository of the task's own, borrowing the mirror's
  objects (alternates), holding the task's branch `controlplane/task-<id>`; only the
  worker reads it (the agent sees its objects read-only);
- `tasks/task-<id>/index`: the index the worker commits a turn with (never the agent's);
- `tasks/task-<id>/ended`: present once the task's turn ended (its time: when it may go);
- `locks/task-<id>.lock`: held by the worker running the task's turn.

The worktree is the task room's `work` folder (`worker.sandbox.task_room`), made anew for
every turn: a repository of the agent's own (`work/.git`, borrowing the task's and the
mirror's objects) checked out at the turn's start commit. The agent may do anything there;
the worker never runs git on the agent's `.git`. It commits what the agent left with its
own git folder and index (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`), so nothing the
agent wrote (a config, a hook, a `.git` file pointing elsewhere) is read by the worker's git.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from controlplane.git import folder_size, git_run
from controlplane.repository_urls import task_branch_name
from controlplane.services.mirrors import LOCAL_TIMEOUT_SECONDS, cache_root, git_dir_env
from worker.sandbox import room_root

# The changed files a task lists (the diff counts them all).
CHANGED_FILES_MAX = 1000
STATUS_NAMES = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "T": "type_changed",
}
DIFF_TRUNCATED_MARKER = (
    "\n[diff truncated: {shown} of {total} bytes shown (WORKER_TASK_DIFF_MAX_BYTES); the whole "
    "change is on the task's branch {branch}]\n"
)


class CheckoutError(Exception):
    """The task's checkout cannot be made or committed; the message says why."""


@dataclass(frozen=True)
class TaskPaths:
    """Where a task's checkout lives on this host."""

    task_id: int
    root: Path  # tasks/task-<id>
    git_dir: Path
    index: Path
    ended: Path
    lock: Path
    worktree: Path

    @property
    def branch(self) -> str:
        return task_branch_name(self.task_id)


def task_paths(*, task_id: int) -> TaskPaths:
    """The task's checkout on this host; the worktree is its room's `work` folder."""
    root = cache_root() / "tasks" / f"task-{int(task_id)}"
    return TaskPaths(
        task_id=task_id,
        root=root,
        git_dir=root / "git",
        index=root / "index",
        ended=root / "ended",
        lock=cache_root() / "locks" / f"task-{int(task_id)}.lock",
        worktree=room_root(task_id=task_id) / "work",
    )


@contextlib.contextmanager
def task_locked(paths: TaskPaths, *, wait: bool = True) -> Iterator[bool]:
    """Hold the task's lock for the block: True, or False at once when another process
    holds it and `wait` is False. The lock file is re-checked after locking, so a cleanup
    that removed it meanwhile cannot leave two holders."""
    paths.lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    while True:
        descriptor = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(descriptor)
            yield False
            return
        try:
            same = os.fstat(descriptor).st_ino == os.stat(paths.lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(descriptor)
    try:
        yield True
    finally:
        os.close(descriptor)


def git_dir_ensure(paths: TaskPaths, *, mirror: Path) -> None:
    """The task's own bare repository, borrowing the mirror's objects."""
    if not (paths.git_dir / "HEAD").is_file():
        shutil.rmtree(paths.git_dir, ignore_errors=True)
        paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        git_run(
            ["init", "--bare", "--quiet", "--template=", str(paths.git_dir)],
            timeout=LOCAL_TIMEOUT_SECONDS,
        )
    paths.ended.unlink(missing_ok=True)
    alternates = paths.git_dir / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{mirror / 'objects'}\n")


def tree_size(git_dir: Path, commit: str) -> int:
    """Bytes the files of `commit`'s tree hold (what its checkout writes, before links and
    the file system's blocks)."""
    result = git_run(
        ["ls-tree", "-r", "-l", "-z", commit],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
    )
    total = 0
    for entry in result.stdout.split(b"\0"):
        fields = entry.split(b"\t", 1)[0].split()
        if len(fields) == 4 and fields[3].isdigit():
            total += int(fields[3])
    return total


def worktree_clear(worktree: Path) -> None:
    """Remove everything under `worktree` (links removed, never followed; folders the agent
    made unreadable opened first) and leave it empty (owner-only)."""
    if worktree.is_symlink() or (worktree.exists() and not worktree.is_dir()):
        worktree.unlink()
    if worktree.exists():

        def unlock_and_retry(function, path, _info) -> None:
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(path), 0o700)
                if not os.path.islink(path) and os.path.isdir(path):
                    os.chmod(path, 0o700)
            with contextlib.suppress(FileNotFoundError):
                function(path)

        shutil.rmtree(worktree, onerror=unlock_and_retry)
    worktree.mkdir(mode=0o700, parents=True, exist_ok=True)


def worktree_create(paths: TaskPaths, *, mirror: Path, start: str, base: str, branch: str) -> None:
    """Check out `start` into the task's (emptied) worktree as a repository of the agent's
    own: its branch `controlplane/task-<id>` at `start`, the task's `branch` at `base` (so
    `git diff <branch>` shows the task's change), objects borrowed from the task's and the
    mirror's. Refused past WORKER_WORKTREE_MAX_BYTES before anything is written."""
    limit = settings.WORKER_WORKTREE_MAX_BYTES
    size = tree_size(paths.git_dir, start)
    if size > limit:
        raise CheckoutError(
            f"the worktree of commit {start} would hold {size} bytes, over "
            f"WORKER_WORKTREE_MAX_BYTES ({limit})"
        )
    worktree_clear(paths.worktree)
    work = paths.worktree
    git_run(
        ["init", "--quiet", "--template=", f"--initial-branch={paths.branch}", str(work)],
        timeout=LOCAL_TIMEOUT_SECONDS,
    )
    agent_git = work / ".git"
    (agent_git / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (agent_git / "objects" / "info" / "alternates").write_text(
        f"{paths.git_dir / 'objects'}\n{mirror / 'objects'}\n"
    )
    env = {"GIT_DIR": str(agent_git), "GIT_WORK_TREE": str(work)}
    refs = {paths.branch: start}
    if branch != paths.branch:
        refs[branch] = base
    for ref, commit in refs.items():
        git_run(["update-ref", f"refs/heads/{ref}", commit], env=env, timeout=LOCAL_TIMEOUT_SECONDS)
    for name, value in (("user.name", "agent"), ("user.email", "agent@localhost")):
        git_run(["config", name, value], env=env, timeout=LOCAL_TIMEOUT_SECONDS)
    git_run(
        ["reset", "--hard", "--quiet"],
        cwd=work,
        env=env,
        timeout=settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS,
        size_limit=(work, limit),
    )


def special_files_removed(worktree: Path) -> int:
    """Remove what is neither a file, a folder nor a link (pipes, sockets, devices) under
    `worktree`: git cannot commit them and reading a pipe would block. How many went."""
    removed = 0
    for top, folders, files in os.walk(worktree, followlinks=False):
        for name in (*folders, *files):
            path = os.path.join(top, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                os.unlink(path)
                removed += 1
    return removed


def turn_commit(paths: TaskPaths, *, start: str, message: str) -> str | None:
    """Commit what the agent left in the worktree on top of `start` onto the task's branch
    (in the task's own git folder, with the worker's own index); the new commit, or None
    when nothing changed. Links are committed as links (never followed); what `.gitignore`
    ignores stays out, as it would for a person."""
    limit = settings.WORKER_WORKTREE_MAX_BYTES
    size = folder_size(paths.worktree)
    if size > limit:
        raise CheckoutError(
            f"the worktree holds {size} bytes after the turn, over WORKER_WORKTREE_MAX_BYTES "
            f"({limit}); its changes were not kept"
        )
    special_files_removed(paths.worktree)
    env = {
        "GIT_DIR": str(paths.git_dir),
        "GIT_WORK_TREE": str(paths.worktree),
        "GIT_INDEX_FILE": str(paths.index),
    }
    paths.index.unlink(missing_ok=True)
    timeout = settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS
    git_run(["read-tree", start], env=env, timeout=timeout)
    git_run(["add", "--all", "--", "."], cwd=paths.worktree, env=env, timeout=timeout)
    tree = git_run(["write-tree"], env=env, timeout=timeout).text
    before = git_run(["rev-parse", f"{start}^{{tree}}"], env=env, timeout=timeout).text
    if tree == before:
        return None
    commit = git_run(["commit-tree", tree, "-p", start, "-m", message], env=env, timeout=timeout)
    head = commit.text
    git_run(["update-ref", f"refs/heads/{paths.branch}", head], env=env, timeout=timeout)
    return head


@dataclass(frozen=True)
class BranchDiff:
    """What a task's branch changes against its base commit."""

    changed_files: list[dict[str, str]]
    files_changed: int
    diff: str
    diff_bytes: int
    truncated: bool


def branch_diff(paths: TaskPaths, *, base: str, head: str) -> BranchDiff:
    """The changed paths (with their status) and the unified diff of `base..head`, cut at
    WORKER_TASK_DIFF_MAX_BYTES with a closing line that says so. Read from the objects only,
    never the worktree. Bytes that are not UTF-8 show as U+FFFD."""
    env = git_dir_env(paths.git_dir)
    timeout = settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS
    listed = git_run(
        ["diff", "--name-status", "-z", "-M", base, head, "--"], env=env, timeout=timeout
    )
    fields = [part.decode("utf-8", errors="replace") for part in listed.stdout.split(b"\0")]
    changed, position = [], 0
    while position < len(fields) and fields[position]:
        code = fields[position]
        paths_of = 2 if code[:1] in ("R", "C") else 1
        path = fields[position + paths_of]
        changed.append({"path": path, "status": STATUS_NAMES.get(code[:1], "other")})
        position += 1 + paths_of
    limit = settings.WORKER_TASK_DIFF_MAX_BYTES
    result = git_run(
        ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M", base, head, "--"],
        env=env,
        timeout=timeout,
        max_stdout=limit,
    )
    raw = result.stdout
    if result.truncated:
        raw = raw[: raw.rfind(b"\n") + 1] if b"\n" in raw else raw
    text = raw.decode("utf-8", errors="replace")
    if result.truncated:
        text += DIFF_TRUNCATED_MARKER.format(
            shown=len(raw), total=result.stdout_bytes, branch=paths.branch
        )
    return BranchDiff(
        changed_files=changed[:CHANGED_FILES_MAX],
        files_changed=len(changed),
        diff=text.replace("\x00", "\ufffd"),
        diff_bytes=result.stdout_bytes,
        truncated=result.truncated,
    )


@dataclass(frozen=True)
class TurnChanges:
    """What a turn left: the task branch's new head and its diff against the base."""

    base_commit: str
    head_commit: str
    diff: BranchDiff


def task_files_remove(paths: TaskPaths) -> None:
    """Remove the task's checkout from this host: its worktree and its git folder (the
    caller holds the task's lock)."""
    worktree_clear(paths.worktree)
    shutil.rmtree(paths.root, ignore_errors=True)
