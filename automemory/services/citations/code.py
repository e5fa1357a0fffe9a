"""What citations read of a repository: files at a commit through ONE `git cat-file --batch`
process, the paths two commits differ in (one `git diff --name-only` per pair, cached), tree
entries' modes (`git ls-tree`, written citations only), and whether a commit is merged.

Every read goes through `controlplane.git.git_run` (the real git, no configuration of the
repository's own, bounded output) on a bare repository: a worker's mirror or the control
plane's. Nothing here reads the filesystem of a checkout, so a symlink in the tree is a blob
holding its target's name, never the file it points at.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from controlplane.git import GitError, git_run
from controlplane.services.mirrors import LOCAL_TIMEOUT_SECONDS, git_dir_env

# A cited file is read whole; larger ones cannot be cited (and are not checked).
MAX_FILE_BYTES = 1024 * 1024
# What one batch read keeps at most; a read past it leaves the rest unread.
MAX_BATCH_BYTES = 64 * 1024 * 1024
# Tree entry modes: a regular file (executable or not). A symlink (120000) or a submodule
# (160000) is not a file one can cite.
FILE_MODES = ("100644", "100755")


@dataclass(frozen=True)
class Blob:
    """A file's bytes at a commit (`data`), or why it could not be read (`missing` for no
    such file, `too_large`)."""

    data: bytes | None
    missing: bool = False
    too_large: bool = False


def lines_of(data: bytes) -> list[bytes]:
    """A file's lines without their line ends ("\\r\\n" and "\\n"); no last empty line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def lines_hash(lines: list[bytes]) -> str:
    """sha256 of the lines joined by "\\n": what a citation records of what it cites."""
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


def is_binary(data: bytes) -> bool:
    """git's own test: a NUL byte in the first 8,000 bytes."""
    return b"\0" in data[:8000]


def blobs_read(git_dir: Path, commit: str, paths: list[str]) -> dict[str, Blob]:
    """Each path's file at `commit`, read by one `git cat-file --batch` process (none when
    `paths` is empty). GitError when git cannot run."""
    found = blobs_read_at(git_dir, [(commit, path) for path in paths])
    return {path: blob for (_, path), blob in found.items()}


def blobs_read_at(git_dir: Path, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], Blob]:
    """Each (commit, path)'s file, read by one `git cat-file --batch` process."""
    wanted = sorted(set(wanted))
    if not wanted:
        return {}
    request = "".join(f"{commit}:{path}\n" for commit, path in wanted).encode()
    result = git_run(
        ["cat-file", "--batch"],
        env=git_dir_env(git_dir),
        input_bytes=request,
        timeout=LOCAL_TIMEOUT_SECONDS,
        max_stdout=MAX_BATCH_BYTES,
    )
    return _batch_parse(result.stdout, wanted, truncated=result.truncated)


def _batch_parse(out: bytes, paths: list, *, truncated: bool) -> dict:
    found: dict = {}
    at = 0
    for path in paths:
        end = out.find(b"\n", at)
        if end < 0:
            break  # the output was cut: the rest is unread
        header = out[at:end].split(b" ")
        at = end + 1
        if len(header) != 3 or header[1] != b"blob":
            if len(header) == 3:  # a tree or a commit (submodule): its content follows
                at += int(header[2]) + 1
            found[path] = Blob(None, missing=True)
            continue
        size = int(header[2])
        if at + size > len(out):
            break
        data = out[at : at + size]
        at += size + 1
        found[path] = Blob(None, too_large=True) if size > MAX_FILE_BYTES else Blob(data)
    if truncated:
        for path in paths:
            found.setdefault(path, Blob(None, too_large=True))
    return found


def modes_read(git_dir: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """Each path's tree entry mode at `commit` (absent: no such entry), one `git ls-tree`."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    result = git_run(
        ["ls-tree", "-z", "--full-tree", commit, "--", *wanted],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
    )
    modes = {}
    for entry in result.stdout.split(b"\0"):
        if b"\t" not in entry:
            continue
        meta, name = entry.split(b"\t", 1)
        modes[name.decode("utf-8", errors="replace")] = meta.split(b" ")[0].decode()
    return modes


@functools.lru_cache(maxsize=4096)
def changed_between(git_dir: Path, old: str, new: str) -> frozenset[str] | None:
    """The paths that differ between `old` and `new` (one `git diff --name-only`), or None
    when `old` is not in the repository any more (a force-push removed it). Both answers are
    cached per pair in this process (4,096 pairs): commits never change, and a commit once
    gone stays gone for the mirror. GitError when git cannot read the repository at all
    (not cached)."""
    if old == new:
        return frozenset()
    if not (git_dir / "HEAD").is_file():
        raise GitError(f"{git_dir} is not a repository")
    result = git_run(
        ["diff", "--name-only", "-z", "--no-renames", old, new, "--"],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        said = result.stderr
        if old in said and new not in said and ("bad object" in said or "unknown revision" in said):
            return None
        raise GitError(f"git diff {old[:12]} {new[:12]} failed: {said[-300:]}")
    names = result.stdout.split(b"\0")
    return frozenset(name.decode("utf-8", errors="replace") for name in names if name)


@functools.lru_cache(maxsize=4096)
def is_ancestor(git_dir: Path, commit: str, head: str) -> bool:
    """Whether `commit` is reachable from `head` (one `git merge-base --is-ancestor`,
    cached per pair: the answer for two commits never changes)."""
    result = git_run(
        ["merge-base", "--is-ancestor", commit, head],
        env=git_dir_env(git_dir),
        timeout=LOCAL_TIMEOUT_SECONDS,
        check=False,
    )
    return result.returncode == 0
