"""The signature of the code a worker runs, so a worker notices when that code is replaced.

A signature is a SHA-256 over the contents of every source file of the packages a worker
runs (`controlplane`, `automemory`, `worker`: their Python files, templates and data files,
not their static files) and the installed versions of the dependencies that change what it
does (Django, the `mcp` SDK, the `openai` SDK). The packages are read where this process
imported them from, so a release directory swapped under a symlink, a `git pull` or an
upgrade of one of those SDKs changes the signature; a file rewritten with the same bytes,
or changed and changed back between two checks, does not.

`CodeSigner` keeps each file's digest under its (device, inode, size, mtime, ctime), so a
check re-reads only the files that changed; a file modified within `RACY_SECONDS` of its
reading is read again next time (a same-size change within the file system's timestamp
granularity is not missed). The worker computes its signature at start-up, stores it on its
`worker_processes` row, and between tasks recomputes it every `WORKER_CODE_CHECK_SECONDS`;
when it differs, the worker leaves with `EXIT_CODE_CHANGED` (docs/worker.md).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from django.db.models import Min, QuerySet, Subquery

from controlplane.supervisor import EXIT_RESTART

# The worker's log lines keep one logger name (as worker/threads.py).
logger = logging.getLogger("worker.loop")

# 75, EX_TEMPFAIL (sysexits.h): "try again later". A worker whose code changed exits with it,
# and a supervisor (`make run`'s, systemd with `RestartForceExitStatus=75`) starts it again.
EXIT_CODE_CHANGED = EXIT_RESTART

PACKAGES = ("controlplane", "automemory", "worker")
DISTRIBUTIONS = ("Django", "mcp", "openai")
# Files that are code or rules: Python, templates, and the data files rules may read.
SUFFIXES = frozenset({".py", ".html", ".txt", ".json", ".toml", ".yaml", ".yml", ".csv", ".tsv"})
# Folders that hold no code the worker runs: bytecode caches, the browser's static files.
SKIPPED_FOLDERS = frozenset({"__pycache__", "static", "node_modules"})
RACY_SECONDS = 2.0
# How many differing files the worker's leaving line names.
SHOWN_DIFFERENCES = 5


@dataclass(frozen=True)
class CodeSignature:
    """`digest`: hex SHA-256 of everything below; `files`: each file's hex SHA-256 by its
    path (`automemory/conf.py`); `versions`: each distribution's version ("" when absent)."""

    digest: str
    files: Mapping[str, str]
    versions: Mapping[str, str]

    @property
    def short(self) -> str:
        return self.digest[:12]

    def differences(self, other: CodeSignature) -> list[str]:
        """What differs from `other`, files first (sorted): `path` (changed), `+path` (new),
        `-path` (gone), then `Django 5.2.1 -> 5.2.2`."""
        changed = []
        for path in sorted(self.files.keys() | other.files.keys()):
            mine, theirs = self.files.get(path), other.files.get(path)
            if mine == theirs:
                continue
            changed.append(f"+{path}" if mine is None else f"-{path}" if theirs is None else path)
        for name in sorted(self.versions.keys() | other.versions.keys()):
            mine, theirs = self.versions.get(name, ""), other.versions.get(name, "")
            if mine != theirs:
                changed.append(f"{name} {mine or '(none)'} -> {theirs or '(none)'}")
        return changed


def _package_roots(packages: Iterable[str]) -> dict[str, Path]:
    """Where each package was imported from (unresolved: a symlinked release stays one)."""
    return {name: Path(importlib.import_module(name).__file__).parent for name in packages}


class CodeSigner:
    """Computes `CodeSignature`s of `roots` (name -> folder; default: where `PACKAGES` were
    imported from) and `distributions`, re-reading only the files that changed since the
    last computation. Not thread-safe: one per worker."""

    def __init__(
        self,
        *,
        roots: Mapping[str, Path] | None = None,
        distributions: Iterable[str] = DISTRIBUTIONS,
    ) -> None:
        self.roots = dict(roots) if roots is not None else _package_roots(PACKAGES)
        self.distributions = tuple(distributions)
        self._cache: dict[str, tuple[tuple[int, ...], str]] = {}

    def compute(self) -> CodeSignature:
        files: dict[str, str] = {}
        seen: dict[str, tuple[tuple[int, ...], str]] = {}
        racy_before = time.time_ns() - int(RACY_SECONDS * 1e9)
        for name, root in sorted(self.roots.items()):
            for path in _source_files(root):
                digest = self._file_digest(path, seen=seen, racy_before=racy_before)
                if digest is not None:
                    files[f"{name}/{path.relative_to(root).as_posix()}"] = digest
        self._cache = seen  # forget files that are gone
        versions = {name: _version(name) for name in self.distributions}
        total = hashlib.sha256()
        for path, digest in sorted(files.items()):
            total.update(f"file\t{path}\t{digest}\n".encode())
        for name, version in sorted(versions.items()):
            total.update(f"dist\t{name}\t{version}\n".encode())
        return CodeSignature(digest=total.hexdigest(), files=files, versions=versions)

    def _file_digest(self, path: Path, *, seen: dict, racy_before: int) -> str | None:
        key_path = str(path)
        try:
            stat = path.stat()
            key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
            cached = self._cache.get(key_path)
            if cached is not None and cached[0] == key:
                seen[key_path] = cached
                return cached[1]
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            return None  # removed while we looked: absent
        if max(stat.st_mtime_ns, stat.st_ctime_ns) < racy_before:
            seen[key_path] = (key, digest)
        return digest


def _source_files(root: Path) -> list[Path]:
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(s for s in subfolders if s not in SKIPPED_FOLDERS)
        base = Path(folder)
        found.extend(base / n for n in sorted(names) if os.path.splitext(n)[1] in SUFFIXES)
    return found


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def code_change_describe(*, old: CodeSignature, new: CodeSignature) -> str:
    """One line for the log: both signatures and the first differences."""
    differences = old.differences(new)
    shown = ", ".join(differences[:SHOWN_DIFFERENCES]) or "none listed"
    more = len(differences) - SHOWN_DIFFERENCES
    if more > 0:
        shown += f" and {more} more"
    return f"code signature {old.short} -> {new.short} ({shown})"


class CodeWatch:
    """The code a worker started with (`start()`), signed again by `check()` at most every
    `interval` seconds (0: never); `changed` is the new signature once it differed."""

    def __init__(
        self, *, interval: float, signer: CodeSigner | None = None, label: str = ""
    ) -> None:
        self.interval = interval
        self.signer = signer or CodeSigner()
        self.label = label
        self.started: CodeSignature | None = None
        self.changed: CodeSignature | None = None
        self._checked_at = 0.0

    def start(self) -> CodeSignature:
        self.started = self.signer.compute()
        self._checked_at = time.monotonic()
        return self.started

    def check(self) -> CodeSignature | None:
        """The new signature when the code changed (logged once, with what differs); None
        when it did not, when the interval has not passed, or before `start()`."""
        if self.changed is not None:
            return self.changed
        if self.started is None or self.interval <= 0:
            return None
        now = time.monotonic()
        if now - self._checked_at < self.interval:
            return None
        self._checked_at = now
        try:
            current = self.signer.compute()
        except Exception:
            logger.warning("could not sign the code; trying again later", exc_info=True)
            return None
        if current.digest == self.started.digest:
            return None
        self.changed = current
        logger.warning(
            "%sits code changed, %s; exiting (status %d) to be restarted",
            f"{self.label}: " if self.label else "",
            code_change_describe(old=self.started, new=current),
            EXIT_CODE_CHANGED,
        )
        return current


# --- The newest signature, as operators see it ----------------------------------------------


def _newest_signatures() -> QuerySet:
    """The signatures running workers report, the one first seen last first: a deploy's new
    code, even while old workers outnumber it (a rolled-back deploy counts as new once its
    workers restart; a stopped worker's signature counts no longer)."""
    from worker.models import WorkerProcess

    return (
        WorkerProcess.objects.filter(stopped_at__isnull=True)
        .exclude(code_signature="")
        .values("code_signature")
        .annotate(first_seen=Min("started_at"))
        .order_by("-first_seen", "-code_signature")
        .values("code_signature")
    )


def code_signature_newest() -> str:
    """The newest code signature among running workers ("" when none reports one)."""
    newest = _newest_signatures().first()
    return newest["code_signature"] if newest else ""


def code_signature_newest_subquery() -> Subquery:
    """`code_signature_newest()` as a subquery, to annotate a `WorkerProcess` queryset."""
    return Subquery(_newest_signatures()[:1])


def code_signature_matches(*, signature: str, newest: str) -> bool | None:
    """Whether a worker runs the newest code; None when either is unknown."""
    if not signature or not newest:
        return None
    return signature == newest
