"""A codex thread's session files as one compressed archive, and back. No database here.

The codex CLI keeps a thread in rollout files under `CODEX_HOME/sessions/YYYY/MM/DD/
rollout-<time>-<thread id>.jsonl`; `codex exec resume <id>` finds the thread by that name in
any day folder and appends the new turn to the same file. An archive holds every such file of
one thread: an uncompressed tar of them (paths relative to `sessions/`, sorted, with fixed
metadata, so the same files always give the same bytes and the same SHA-256), stored gzip-
compressed. The checksum is taken over the tar, so it tells a current local copy apart from a
stale one as well as a corrupt session record from a good one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path

THREAD_ID_PATTERN = re.compile(r"^[A-Za-z0-9-]{1,100}$")
# A session file's path relative to `sessions/`: a day folder and a rollout name.
SESSION_FILE_PATTERN = re.compile(r"^\d{4}/\d{2}/\d{2}/rollout-[A-Za-z0-9._-]{1,200}\.jsonl$")
# gzip level 1: about 7 times faster than the default 6 for some 13% more bytes (measured on
# 10 MB of rollout-like lines); the store runs between the agent finishing and the turn ending.
COMPRESS_LEVEL = 1


class SessionArchiveError(Exception):
    """A stored archive that cannot be used: corrupt, truncated or not of this thread."""


def thread_days(thread_id: str) -> list[str]:
    """`YYYY/MM/DD` folders a UUIDv7 thread's files may be in (any local time zone).

    Codex thread ids are UUIDv7, whose first 48 bits are the creation time in milliseconds.
    """
    digits = thread_id.replace("-", "")
    if len(digits) != 32 or digits[12] != "7":
        return []
    try:
        created = datetime.fromtimestamp(int(digits[:12], 16) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return []
    return [(created + timedelta(days=shift)).strftime("%Y/%m/%d") for shift in (0, -1, 1)]


def session_files(*, thread_id: str, home: Path) -> list[Path]:
    """The thread's rollout files under `home/sessions`, sorted by path; [] for none.

    The day folders around a UUIDv7 id's creation time are searched first, so the lookup does
    not list every session the worker ever ran.
    """
    if not thread_id or not THREAD_ID_PATTERN.match(thread_id):
        return []
    sessions = home / "sessions"
    name = f"rollout-*-{thread_id}.jsonl"
    found: list[Path] = []
    for day in thread_days(thread_id):
        found += (sessions / day).glob(name)
    if not found:
        found = list(sessions.glob(f"*/*/*/{name}"))
    return sorted(path for path in found if path.is_file())


@dataclass(frozen=True)
class SessionArchive:
    """A thread's session files as one tar (`tar`, uncompressed) and their names in it."""

    thread_id: str
    tar: bytes
    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.tar)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.tar).hexdigest()

    def compressed(self) -> bytes:
        """The archive as stored: gzip, without a file name or time in its header."""
        return gzip.compress(self.tar, compresslevel=COMPRESS_LEVEL, mtime=0)


def session_archive_build(*, thread_id: str, home: Path) -> SessionArchive | None:
    """The thread's files under `home` as an archive; None when there are none."""
    paths = session_files(thread_id=thread_id, home=home)
    if not paths:
        return None
    sessions = home / "sessions"
    buffer = io.BytesIO()
    names = []
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            name = path.relative_to(sessions).as_posix()
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, 0
            tar.addfile(info, io.BytesIO(data))
            names.append(name)
    return SessionArchive(thread_id=thread_id, tar=buffer.getvalue(), names=tuple(names))


def session_archive_open(
    *, thread_id: str, compressed: bytes, sha256: str, size: int
) -> SessionArchive:
    """The archive stored as `compressed`, checked against its recorded size and checksum.

    Decompression stops one byte past `size`, so a corrupt or hostile archive cannot expand
    without bound. Raises SessionArchiveError naming what is wrong.
    """
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip
    try:
        tar = decompressor.decompress(compressed, size + 1)
    except zlib.error as exc:
        raise SessionArchiveError(f"it does not decompress ({exc})") from None
    if len(tar) != size or not decompressor.eof:
        raise SessionArchiveError(
            f"it decompresses to {'more than ' if len(tar) > size else ''}{len(tar)} bytes, "
            f"not the {size} recorded"
        )
    actual = hashlib.sha256(tar).hexdigest()
    if actual != sha256:
        raise SessionArchiveError(f"its SHA-256 is {actual}, not the {sha256} recorded")
    names = []
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
            for member in archive.getmembers():
                if not member.isfile() or not _is_session_file(member.name, thread_id):
                    raise SessionArchiveError(f"it holds {member.name!r}, not a session file")
                names.append(member.name)
    except tarfile.TarError as exc:
        raise SessionArchiveError(f"it is not a readable tar ({exc})") from None
    if not names:
        raise SessionArchiveError("it holds no session file")
    return SessionArchive(thread_id=thread_id, tar=tar, names=tuple(names))


def session_archive_extract(*, archive: SessionArchive, home: Path) -> list[Path]:
    """Write the archive's files under `home/sessions`, replacing the thread's files there.

    Files of the thread that the archive does not hold (a stale copy in another day folder)
    are removed, so the CLI finds the restored ones. Each file is written to a temporary name
    and renamed into place, so the CLI never sees half a file.
    """
    sessions = home / "sessions"
    written = []
    with tarfile.open(fileobj=io.BytesIO(archive.tar), mode="r:") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not _is_session_file(member.name, archive.thread_id):
                raise SessionArchiveError(f"it holds {member.name!r}, not a session file")
            target = sessions / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            data = source.read() if source is not None else b""
            handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".restore-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
                os.chmod(temporary, 0o600)
                os.replace(temporary, target)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            written.append(target)
    for stale in session_files(thread_id=archive.thread_id, home=home):
        if stale not in written:
            stale.unlink(missing_ok=True)
    return written


def _is_session_file(name: str, thread_id: str) -> bool:
    return bool(SESSION_FILE_PATTERN.match(name)) and name.endswith(f"-{thread_id}.jsonl")
