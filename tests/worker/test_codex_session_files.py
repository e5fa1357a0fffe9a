"""The CLI's session files of a thread and their archive (`worker.codex.session_files`): the
format, its checksum, and what a hostile or damaged archive is refused for."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile

import pytest

from worker.codex.session_files import (
    SessionArchiveError,
    session_archive_build,
    session_archive_extract,
    session_archive_open,
    session_files,
)

THREAD = "01a23200-69c4-7910-850a-77f278fe2da7"  # UUIDv7: created 2026-12-01
OTHER = "01a23200-69c4-7910-850a-000000000000"


def write_rollout(home, thread=THREAD, *, day="2026/12/01", text='{"type":"session_meta"}\n'):
    path = home / "sessions" / day / f"rollout-2026-12-01T14-26-57-{thread}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def opened(archive):
    return session_archive_open(
        thread_id=archive.thread_id,
        compressed=archive.compressed(),
        sha256=archive.sha256,
        size=archive.size,
    )


def hand_made(members, thread=THREAD):
    """A compressed tar of (name, bytes, type) members, with its true size and checksum."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    raw = buffer.getvalue()
    return {
        "thread_id": thread,
        "compressed": gzip.compress(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "size": len(raw),
    }


# --- The archive --------------------------------------------------------------------------


def test_an_archive_restores_the_same_files_in_another_home(tmp_path):
    first = write_rollout(tmp_path / "a", text="line 1\nline 2\n")
    write_rollout(tmp_path / "a", OTHER)  # another thread's file stays out
    archive = session_archive_build(thread_id=THREAD, home=tmp_path / "a")

    [written] = session_archive_extract(archive=opened(archive), home=tmp_path / "b")

    assert archive.names == ("2026/12/01/" + first.name,)
    assert written.relative_to(tmp_path / "b") == first.relative_to(tmp_path / "a")
    assert written.read_bytes() == first.read_bytes()
    assert oct(written.stat().st_mode & 0o777) == "0o600"


def test_the_checksum_depends_on_the_files_only(tmp_path):
    path = write_rollout(tmp_path)
    one = session_archive_build(thread_id=THREAD, home=tmp_path)
    os.utime(path, (0, 0))
    assert session_archive_build(thread_id=THREAD, home=tmp_path).sha256 == one.sha256
    assert session_archive_build(thread_id=THREAD, home=tmp_path).compressed() == one.compressed()
    path.write_text(path.read_text() + "more\n")
    assert session_archive_build(thread_id=THREAD, home=tmp_path).sha256 != one.sha256


def test_a_thread_without_files_has_no_archive(tmp_path):
    write_rollout(tmp_path, OTHER)
    assert session_archive_build(thread_id=THREAD, home=tmp_path) is None
    assert session_archive_build(thread_id="../../etc", home=tmp_path) is None


def test_a_thread_s_files_in_any_day_folder_are_found(tmp_path):
    """Restored on a host in another time zone, or a non-UUIDv7 id: every day is searched."""
    path = write_rollout(tmp_path, day="2020/01/01")
    assert session_files(thread_id=THREAD, home=tmp_path) == [path]


def test_extracting_replaces_a_copy_of_the_thread_in_another_day_folder(tmp_path):
    archive = session_archive_build(thread_id=THREAD, home=write_rollout(tmp_path / "a").parents[4])
    stale = write_rollout(tmp_path / "b", day="2026/11/30", text="old\n")

    session_archive_extract(archive=opened(archive), home=tmp_path / "b")

    assert not stale.exists()
    assert [p.read_text() for p in session_files(thread_id=THREAD, home=tmp_path / "b")] == [
        '{"type":"session_meta"}\n'
    ]


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("../../../etc/cron.d/x", b"x", tarfile.REGTYPE)], "not a session file"),
        ([("/2026/12/01/rollout-x-" + THREAD + ".jsonl", b"x", tarfile.REGTYPE)], "not a session"),
        ([(f"2026/12/01/rollout-x-{OTHER}.jsonl", b"x", tarfile.REGTYPE)], "not a session file"),
        ([(f"2026/12/01/rollout-x-{THREAD}.jsonl", b"", tarfile.SYMTYPE)], "not a session file"),
        ([(f"2026/12/01/rollout-x-{THREAD}.json", b"x", tarfile.REGTYPE)], "not a session file"),
        ([], "holds no session file"),
    ],
    ids=["traversal", "absolute", "other thread", "symlink", "other name", "empty"],
)
def test_an_archive_with_anything_but_the_thread_s_session_files_is_refused(members, message):
    with pytest.raises(SessionArchiveError, match=message):
        session_archive_open(**hand_made(members))


def test_an_archive_larger_than_recorded_is_refused_without_expanding_it():
    """An archive claiming a small size cannot make the worker inflate gigabytes."""
    bomb = hand_made([(f"2026/12/01/rollout-x-{THREAD}.jsonl", bytes(5_000_000), tarfile.REGTYPE)])
    assert len(bomb["compressed"]) < 10_000
    with pytest.raises(SessionArchiveError, match="decompresses to more than 1001 bytes"):
        session_archive_open(**{**bomb, "size": 1000})


def test_bytes_that_are_not_gzip_are_refused():
    good = hand_made([(f"2026/12/01/rollout-x-{THREAD}.jsonl", b"x", tarfile.REGTYPE)])
    with pytest.raises(SessionArchiveError, match="does not decompress"):
        session_archive_open(**{**good, "compressed": b"PK\x03\x04 not gzip"})
