"""One bare mirror of each repository per host, under `WORKER_REPO_CACHE/mirrors/`, and the
reads every user of a project's code makes through it: a branch's head, a file at a commit,
the paths changed between two commits.

A mirror holds the remote's branches (`refs/heads/*`), never the task branches
(`controlplane/*`: each task keeps its own, `worker.workspace`), and is fetched under a lock
file, so several workers of one host share it. It is named by the repository's id and its
URL, so a changed URL starts a new mirror and two projects never share one.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from django.conf import settings

from controlplane.credentials import credential_decrypt
from controlplane.git import (
    GitError,
    GitResult,
    GitSizeExceeded,
    GitTimeout,
    Remote,
    folder_size,
    git_run,
    remote_env,
)
from controlplane.models import Repository
from controlplane.repository_urls import (
    TASK_BRANCH_PREFIX,
    RepositoryUrlError,
    file_path_problem,
    remote_url_parse,
)

LOCAL_TIMEOUT_SECONDS = 120.0
FETCH_REFSPECS = ("+refs/heads/*:refs/heads/*", f"^refs/heads/{TASK_BRANCH_PREFIX}*")


class MirrorError(Exception):
    """The mirror could not be brought up to date; the message names the remote and why."""


def repository_remote(repository: Repository) -> Remote:
    """How git reaches the repository: its URL checked again (a file:// path may have
    become a link elsewhere since it was saved) and its credential decrypted."""
    try:
        url = remote_url_parse(repository.url)
    except RepositoryUrlError as exc:
        raise MirrorError(f"the repository URL {repository.url} cannot be used: {exc}") from None
    if url.kind == "file":
        problem = file_path_problem(url.path)
        if problem:
            raise MirrorError(f"the repository URL {repository.url} cannot be used: {problem}")
    credential = ""
    if repository.credential_ciphertext:
        credential = credential_decrypt(repository.credential_ciphertext)
    return Remote(url=url, credential=credential)


def cache_root() -> Path:
    return Path(settings.WORKER_REPO_CACHE).resolve()


def mirror_path(repository: Repository) -> Path:
    """`<cache>/mirrors/repo-<id>-<sha256 of the URL, 12 hex>.git`."""
    digest = hashlib.sha256(repository.url.encode()).hexdigest()[:12]
    return cache_root() / "mirrors" / f"repo-{repository.pk}-{digest}.git"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) for the block's length: between the
    threads and processes of one host (flock on an open file of its own)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def git_dir_env(git_dir: Path) -> dict[str, str]:
    return {"GIT_DIR": str(git_dir)}


def remote_fetch(
    git_dir: Path,
    remote: Remote,
    refspecs: Sequence[str],
    *,
    timeout: float,
    prune: bool = False,
    size_limit: tuple[Path, int] | None = None,
    check: bool = True,
) -> GitResult:
    """Fetch `refspecs` from `remote`, with its credential, into the repository at
    `git_dir`: no tags, no FETCH_HEAD, quietly (and dropping the refs the remote no longer
    has with `prune`). `timeout`, `size_limit` and `check` as `git_run`'s."""
    with remote_env(remote) as access:
        return git_run(
            [
                "fetch",
                *(["--prune"] if prune else []),
                "--no-tags",
                "--no-write-fetch-head",
                "--quiet",
                remote.url.url,
                *refspecs,
            ],
            env={**git_dir_env(git_dir), **access},
            timeout=timeout,
            size_limit=size_limit,
            secrets=[remote.credential],
            check=check,
        )


def mirror_fetch(repository: Repository, *, remote: Remote | None = None) -> Path:
    """Bring the repository's mirror on this host up to date with its remote (created on
    first use); its path. MirrorError names the remote and says why when it fails: the
    remote unreachable, the credential refused, the fetch past its timeout or the mirror
    past WORKER_REPO_MIRROR_MAX_BYTES."""
    remote = remote or repository_remote(repository)
    path = mirror_path(repository)
    with file_lock(path.with_suffix(".lock")):
        if not (path / "HEAD").is_file():
            shutil.rmtree(path, ignore_errors=True)  # an init a killed worker left half-done
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            git_run(["init", "--bare", "--quiet", str(path)], timeout=LOCAL_TIMEOUT_SECONDS)
        limit = settings.WORKER_REPO_MIRROR_MAX_BYTES
        try:
            remote_fetch(
                path,
                remote,
                FETCH_REFSPECS,
                timeout=settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS,
                prune=True,
                size_limit=(path, limit),
            )
        except GitSizeExceeded:
            shutil.rmtree(path, ignore_errors=True)
            raise MirrorError(
                f"the mirror of {remote.url.url} grew past WORKER_REPO_MIRROR_MAX_BYTES "
                f"({limit} bytes) while fetching; the fetch was stopped"
            ) from None
        except GitTimeout:
            raise MirrorError(
                f"fetching {remote.url.url} timed out after "
                f"{settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS:g}s "
                "(WORKER_REPO_FETCH_TIMEOUT_SECONDS)"
            ) from None
        except GitError as exc:
            raise MirrorError(f"could not fetch {remote.url.url}: {_said(exc)}") from None
        size = folder_size(path)
        if size > limit:
            shutil.rmtree(path, ignore_errors=True)
            raise MirrorError(
                f"the mirror of {remote.url.url} holds {size} bytes, over "
                f"WORKER_REPO_MIRROR_MAX_BYTES ({limit} bytes); it was removed"
            )
    return path


def _said(exc: GitError) -> str:
    lines = [line.strip() for line in exc.stderr.splitlines() if line.strip()]
    meaningful = [line for line in lines if line.lower().startswith(("fatal", "error", "remote"))]
    return " / ".join((meaningful or lines)[-3:])[:1000] or str(exc)


def branch_head_resolve(git_dir: Path, branch: str) -> str | None:
    """The commit `branch` points at in the repository at `git_dir` (a mirror after its
    fetch), or None when there is no such branch."""
    result = git_run(
        ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
        check=False,
    )
    return result.text or None


def commit_present(git_dir: Path, commit: str) -> bool:
    """Whether `commit` (a full hash) is a commit in the repository at `git_dir`."""
    result = git_run(
        ["cat-file", "-e", f"{commit}^{{commit}}"],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
        check=False,
    )
    return result.returncode == 0


def blob_read(git_dir: Path, commit: str, path: str, *, max_bytes: int) -> bytes | None:
    """The content of `path` at `commit` (at most `max_bytes`), or None when the path is
    not a file there. Reads one object; nothing else of the tree."""
    result = git_run(
        ["cat-file", "blob", f"{commit}:{path}"],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
        max_stdout=max_bytes,
        check=False,
    )
    return result.stdout if result.returncode == 0 else None


@functools.lru_cache(maxsize=1024)
def paths_changed(git_dir: Path, old: str, new: str) -> tuple[str, ...]:
    """The paths that differ between commits `old` and `new` (one `git diff --name-only`,
    cached per pair: commits never change)."""
    result = git_run(
        ["diff", "--name-only", "-z", "--no-renames", old, new, "--"],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
    )
    names = result.stdout.split(b"\0")
    return tuple(name.decode("utf-8", errors="replace") for name in names if name)
