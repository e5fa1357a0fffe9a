"""Codex session records: the archive format, storing under the task's holder, restoring,
retention. The real CLI across hosts is in real_codex/test_real_codex_hosts.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from controlplane.models import TaskStatus
from controlplane.settings import object_storage_settings
from worker import session_records
from worker.executors.codex_sessions import (
    SessionArchiveError,
    session_archive_build,
    session_archive_extract,
    session_archive_open,
    session_files,
)
from worker.models import CodexSession
from worker.session_records import (
    SessionKeeper,
    SessionRecordError,
    codex_session_restore,
    codex_session_store,
    codex_sessions_prune,
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
    """A record claiming a small size cannot make the worker inflate gigabytes."""
    bomb = hand_made([(f"2026/12/01/rollout-x-{THREAD}.jsonl", bytes(5_000_000), tarfile.REGTYPE)])
    assert len(bomb["compressed"]) < 10_000
    with pytest.raises(SessionArchiveError, match="decompresses to more than 1001 bytes"):
        session_archive_open(**{**bomb, "size": 1000})


def test_bytes_that_are_not_gzip_are_refused():
    good = hand_made([(f"2026/12/01/rollout-x-{THREAD}.jsonl", b"x", tarfile.REGTYPE)])
    with pytest.raises(SessionArchiveError, match="does not decompress"):
        session_archive_open(**{**good, "compressed": b"PK\x03\x04 not gzip"})


# --- Storing under the task's holder -------------------------------------------------------


@pytest.fixture
def running_task(project, task_factory):
    task = task_factory(project)
    task.status, task.worker_id, task.thread_id = TaskStatus.RUNNING, "w1", THREAD
    task.save()
    return task


def archive_of(tmp_path, text='{"type":"session_meta"}\n'):
    return session_archive_build(
        thread_id=THREAD, home=write_rollout(tmp_path, text=text).parents[4]
    )


def test_the_holder_stores_and_a_later_turn_replaces_the_record(running_task, tmp_path):
    first = archive_of(tmp_path / "1")
    assert codex_session_store(task_id=running_task.pk, worker_id="w1", turn=1, archive=first) == (
        "stored"
    )
    second = archive_of(tmp_path / "2", text="turn 1\nturn 2\n")
    codex_session_store(task_id=running_task.pk, worker_id="w1", turn=2, archive=second)

    record = CodexSession.objects.get(thread_id=THREAD)
    assert (record.task_id, record.turn, record.sha256, record.size) == (
        running_task.pk,
        2,
        second.sha256,
        second.size,
    )
    assert (record.storage, record.stored_size, record.file_count) == (
        "database",
        len(record.data),
        1,
    )
    assert gzip.decompress(bytes(record.data)) == second.tar


@pytest.mark.parametrize("holder", [("w2", TaskStatus.RUNNING), ("w1", TaskStatus.COMPLETED)])
def test_a_worker_that_no_longer_holds_the_task_stores_nothing(running_task, tmp_path, holder):
    """Its run was discarded: the new holder's record must not be overwritten by it."""
    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "1")
    )
    running_task.worker_id, running_task.status = holder
    running_task.save()

    outcome = codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=2, archive=archive_of(tmp_path / "2", "x\n")
    )

    assert outcome == "not_owner"
    assert CodexSession.objects.get(thread_id=THREAD).turn == 1


def test_the_database_refuses_a_record_held_nowhere(running_task):
    now = timezone.now()
    fields = {"thread_id": THREAD, "task": running_task, "turn": 1, "sha256": "0" * 64}
    fields |= {"size": 1, "file_count": 1, "created_at": now, "updated_at": now}
    with pytest.raises(IntegrityError), transaction.atomic():
        CodexSession.objects.create(**fields, storage="database", stored_size=10)  # no bytes
    with pytest.raises(IntegrityError), transaction.atomic():
        CodexSession.objects.create(**fields, storage="database")  # not held, no reason


# --- Restoring ------------------------------------------------------------------------------


def test_restore_outcomes(running_task, tmp_path):
    home = tmp_path / "home"
    assert codex_session_restore(thread_id=THREAD, home=home) == "absent"
    write_rollout(home)
    assert codex_session_restore(thread_id=THREAD, home=home) == "local_only"
    archive = session_archive_build(thread_id=THREAD, home=home)
    codex_session_store(task_id=running_task.pk, worker_id="w1", turn=1, archive=archive)
    assert codex_session_restore(thread_id=THREAD, home=home) == "current"
    write_rollout(home, text="a diverged local copy\n")
    assert codex_session_restore(thread_id=THREAD, home=home) == "restored"
    assert session_archive_build(thread_id=THREAD, home=home).sha256 == archive.sha256
    assert codex_session_restore(thread_id=THREAD, home=tmp_path / "fresh") == "restored"


def test_a_record_whose_row_lost_its_bytes_is_refused(running_task, tmp_path):
    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "a")
    )
    CodexSession.objects.update(
        stored_size=None, data=None, error="object storage failed: EndpointConnectionError: x"
    )
    with pytest.raises(SessionRecordError, match="is not held: object storage failed"):
        codex_session_restore(thread_id=THREAD, home=tmp_path / "b")


# --- Object storage (a real S3-compatible server on 127.0.0.1) ------------------------------


def bucket_keys(bucket):
    listed = bucket.client.list_objects_v2(Bucket=bucket.bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_records_in_object_storage_replace_their_object_and_restore(
    session_bucket, running_task, tmp_path
):
    first, second = archive_of(tmp_path / "1"), archive_of(tmp_path / "2", "turn 2\n")
    codex_session_store(task_id=running_task.pk, worker_id="w1", turn=1, archive=first)
    assert bucket_keys(session_bucket) == [f"codex/{THREAD}/{first.sha256}.tar.gz"]
    codex_session_store(task_id=running_task.pk, worker_id="w1", turn=2, archive=second)

    record = CodexSession.objects.get(thread_id=THREAD)
    assert bucket_keys(session_bucket) == [f"codex/{record.object_name}"]
    assert (record.storage, record.data, record.object_name) == (
        "object",
        None,
        f"{THREAD}/{second.sha256}.tar.gz",
    )
    assert codex_session_restore(thread_id=THREAD, home=tmp_path / "b") == "restored"
    assert session_archive_build(thread_id=THREAD, home=tmp_path / "b").tar == second.tar


def test_a_worker_that_lost_its_task_leaves_no_object_behind(
    session_bucket, running_task, tmp_path
):
    first = archive_of(tmp_path / "1")
    codex_session_store(task_id=running_task.pk, worker_id="w1", turn=1, archive=first)
    running_task.worker_id = "w2"
    running_task.save()

    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=2, archive=archive_of(tmp_path / "2", "x\n")
    )

    assert bucket_keys(session_bucket) == [f"codex/{THREAD}/{first.sha256}.tar.gz"]


def test_an_unreachable_object_storage_is_recorded_as_the_reason(
    session_bucket, running_task, tmp_path, settings
):
    url = "s3://nowhere/codex?endpoint_url=http://127.0.0.1:9&region_name=us-east-1"
    settings.STORAGES = {**settings.STORAGES, "codex_sessions": object_storage_settings(url)}
    archive = archive_of(tmp_path)

    assert (
        codex_session_store(task_id=running_task.pk, worker_id="w1", turn=1, archive=archive)
        == "not_held"
    )

    record = CodexSession.objects.get(thread_id=THREAD)
    assert (record.sha256, record.stored_size, record.object_name) == (archive.sha256, None, "")
    assert record.error.startswith("object storage failed: ")
    # its own host goes on (its copy is the latest state); any other says why it cannot
    assert codex_session_restore(thread_id=THREAD, home=tmp_path) == "current"
    with pytest.raises(SessionRecordError, match="is not held: object storage failed"):
        codex_session_restore(thread_id=THREAD, home=tmp_path / "elsewhere")


def test_prune_deletes_idle_records_and_objects_no_record_names(
    session_bucket, running_task, project, task_factory, tmp_path, capsys
):
    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "1")
    )
    session_bucket.client.put_object(
        Bucket=session_bucket.bucket, Key=f"codex/{OTHER}/{'0' * 64}.tar.gz", Body=b"orphan"
    )
    later = timezone.now() + timedelta(hours=2)

    dry = codex_sessions_prune(dry_run=True, now=later)
    assert (dry.records_deleted, dry.objects_deleted) == (0, 1)
    assert len(bucket_keys(session_bucket)) == 2
    # the orphan is younger than an hour: a store may be about to name it
    assert codex_sessions_prune().objects_deleted == 0

    report = codex_sessions_prune(now=later)
    assert (report.records_deleted, report.objects_deleted) == (0, 1)
    assert bucket_keys(session_bucket) == [f"codex/{CodexSession.objects.get().object_name}"]

    call_command("codex_sessions_prune", "--idle-days", "1")  # updated just now: kept
    assert CodexSession.objects.count() == 1
    CodexSession.objects.update(updated_at=timezone.now() - timedelta(days=2))
    call_command("codex_sessions_prune", "--idle-days", "1")
    assert "deleted 1 records and 1 objects" in capsys.readouterr().out
    assert (CodexSession.objects.count(), bucket_keys(session_bucket)) == (0, [])


def test_a_deleted_task_takes_its_record_with_it(running_task, tmp_path):
    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path)
    )
    running_task.delete()
    assert not CodexSession.objects.exists()


# --- Settings ---------------------------------------------------------------------------------


def test_an_s3_url_becomes_a_django_storages_entry():
    entry = object_storage_settings(
        "s3://bucket/some/prefix/?endpoint_url=http://minio:9000&region_name=eu-west-1"
    )
    assert entry["BACKEND"] == "storages.backends.s3.S3Storage"
    assert entry["OPTIONS"] | {} == {
        "bucket_name": "bucket",
        "location": "some/prefix",
        "endpoint_url": "http://minio:9000",
        "region_name": "eu-west-1",
        "file_overwrite": True,
        "default_acl": None,
        "querystring_auth": False,
    }


@pytest.mark.parametrize(
    "url", ["s3:///prefix", "gs://bucket", "bucket", "s3://bucket?access_key=AKIA"]
)
def test_a_storage_setting_that_is_not_an_s3_url_stops_the_process(url):
    with pytest.raises(ImproperlyConfigured, match="WORKER_CODEX_SESSION_STORAGE"):
        object_storage_settings(url)


# --- The keeper: a database blip while storing -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_store_the_database_refused_is_retried(running_task, tmp_path, settings, monkeypatch):
    settings.WORKER_CODEX_SESSION_STORE_RETRY_SECONDS = 5
    real, calls = session_records.codex_session_store, []

    def refused_once(**kwargs):
        calls.append(kwargs["turn"])
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    monkeypatch.setattr(session_records, "codex_session_store", refused_once)
    write_rollout(tmp_path)
    keeper = SessionKeeper(task_id=running_task.pk, worker_id="w1", turn=1)

    assert keeper.store(thread_id=THREAD, home=tmp_path) == "stored"
    assert calls == [1, 1]
    assert CodexSession.objects.get().turn == 1


@pytest.mark.django_db(transaction=True)
def test_a_store_the_database_keeps_refusing_gives_up_without_raising(
    running_task, tmp_path, settings, monkeypatch
):
    settings.WORKER_CODEX_SESSION_STORE_RETRY_SECONDS = 1

    def refused(**kwargs):
        raise OperationalError("the database system is shutting down")

    monkeypatch.setattr(session_records, "codex_session_store", refused)
    write_rollout(tmp_path)
    keeper = SessionKeeper(task_id=running_task.pk, worker_id="w1", turn=1)

    assert keeper.store(thread_id=THREAD, home=tmp_path) is None
    assert not CodexSession.objects.exists()


def test_the_admin_lists_records_without_their_bytes(
    running_task, tmp_path, client, django_user_model
):
    codex_session_store(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path)
    )
    admin = django_user_model.objects.create_superuser("root", password="pw-for-tests")
    client.force_login(admin)
    listing = client.get("/admin/worker/codexsession/")
    detail = client.get(f"/admin/worker/codexsession/{CodexSession.objects.get().pk}/change/")
    assert listing.status_code == detail.status_code == 200
    assert THREAD in listing.content.decode()
    assert b'name="data"' not in detail.content
