"""Stored codex sessions (`worker.codex.session_store`): storing under the task's holder,
restoring, retention. The archive format is in test_codex_session_files.py; the real CLI
across hosts in real_codex/test_real_codex_hosts.py."""

from __future__ import annotations

import gzip
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from controlplane.models import TaskStatus
from controlplane.settings import object_storage_settings
from tests.worker.test_codex_session_files import OTHER, THREAD, write_rollout
from worker.codex import session_store
from worker.codex.session_files import session_archive_build
from worker.codex.session_store import (
    SessionRecordError,
    SessionStore,
    session_record_restore,
    session_record_write,
    session_records_prune,
)
from worker.executors.base import RunHolder
from worker.models import CodexSession

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


def test_the_holder_stores_and_a_later_turn_replaces_the_stored_session(running_task, tmp_path):
    first = archive_of(tmp_path / "1")
    assert session_record_write(task_id=running_task.pk, worker_id="w1", turn=1, archive=first) == (
        "stored"
    )
    second = archive_of(tmp_path / "2", text="turn 1\nturn 2\n")
    session_record_write(task_id=running_task.pk, worker_id="w1", turn=2, archive=second)

    stored = CodexSession.objects.get(thread_id=THREAD)
    assert (stored.task_id, stored.turn, stored.sha256, stored.size) == (
        running_task.pk,
        2,
        second.sha256,
        second.size,
    )
    assert (stored.storage, stored.stored_size, stored.file_count) == (
        "database",
        len(stored.data),
        1,
    )
    assert gzip.decompress(bytes(stored.data)) == second.tar


@pytest.mark.parametrize("holder", [("w2", TaskStatus.RUNNING), ("w1", TaskStatus.COMPLETED)])
def test_a_worker_that_no_longer_holds_the_task_stores_nothing(running_task, tmp_path, holder):
    """Its run was discarded: the new holder's stored must not be overwritten by it."""
    session_record_write(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "1")
    )
    running_task.worker_id, running_task.status = holder
    running_task.save()

    outcome = session_record_write(
        task_id=running_task.pk, worker_id="w1", turn=2, archive=archive_of(tmp_path / "2", "x\n")
    )

    assert outcome == "not_owner"
    assert CodexSession.objects.get(thread_id=THREAD).turn == 1


def test_the_database_refuses_a_session_held_nowhere(running_task):
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
    assert session_record_restore(thread_id=THREAD, home=home) == "absent"
    write_rollout(home)
    assert session_record_restore(thread_id=THREAD, home=home) == "local_only"
    archive = session_archive_build(thread_id=THREAD, home=home)
    session_record_write(task_id=running_task.pk, worker_id="w1", turn=1, archive=archive)
    assert session_record_restore(thread_id=THREAD, home=home) == "current"
    write_rollout(home, text="a diverged local copy\n")
    assert session_record_restore(thread_id=THREAD, home=home) == "restored"
    assert session_archive_build(thread_id=THREAD, home=home).sha256 == archive.sha256
    assert session_record_restore(thread_id=THREAD, home=tmp_path / "fresh") == "restored"


def test_a_stored_session_whose_row_lost_its_bytes_is_refused(running_task, tmp_path):
    session_record_write(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "a")
    )
    CodexSession.objects.update(
        stored_size=None, data=None, error="object storage failed: EndpointConnectionError: x"
    )
    with pytest.raises(SessionRecordError, match="is not held: object storage failed"):
        session_record_restore(thread_id=THREAD, home=tmp_path / "b")


# --- Object storage (a real S3-compatible server on 127.0.0.1) ------------------------------


def bucket_keys(bucket):
    listed = bucket.client.list_objects_v2(Bucket=bucket.bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_sessions_in_object_storage_replace_their_object_and_restore(
    session_bucket, running_task, tmp_path
):
    first, second = archive_of(tmp_path / "1"), archive_of(tmp_path / "2", "turn 2\n")
    session_record_write(task_id=running_task.pk, worker_id="w1", turn=1, archive=first)
    assert bucket_keys(session_bucket) == [f"codex/{THREAD}/{first.sha256}.tar.gz"]
    session_record_write(task_id=running_task.pk, worker_id="w1", turn=2, archive=second)

    stored = CodexSession.objects.get(thread_id=THREAD)
    assert bucket_keys(session_bucket) == [f"codex/{stored.object_name}"]
    assert (stored.storage, stored.data, stored.object_name) == (
        "object",
        None,
        f"{THREAD}/{second.sha256}.tar.gz",
    )
    assert session_record_restore(thread_id=THREAD, home=tmp_path / "b") == "restored"
    assert session_archive_build(thread_id=THREAD, home=tmp_path / "b").tar == second.tar


def test_a_worker_that_lost_its_task_leaves_no_object_behind(
    session_bucket, running_task, tmp_path
):
    first = archive_of(tmp_path / "1")
    session_record_write(task_id=running_task.pk, worker_id="w1", turn=1, archive=first)
    running_task.worker_id = "w2"
    running_task.save()

    session_record_write(
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
        session_record_write(task_id=running_task.pk, worker_id="w1", turn=1, archive=archive)
        == "not_held"
    )

    stored = CodexSession.objects.get(thread_id=THREAD)
    assert (stored.sha256, stored.stored_size, stored.object_name) == (archive.sha256, None, "")
    assert stored.error.startswith("object storage failed: ")
    # its own host goes on (its copy is the latest state); any other says why it cannot
    assert session_record_restore(thread_id=THREAD, home=tmp_path) == "current"
    with pytest.raises(SessionRecordError, match="is not held: object storage failed"):
        session_record_restore(thread_id=THREAD, home=tmp_path / "elsewhere")


def test_prune_deletes_idle_sessions_and_objects_no_row_names(
    session_bucket, running_task, project, task_factory, tmp_path, capsys
):
    session_record_write(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path / "1")
    )
    session_bucket.client.put_object(
        Bucket=session_bucket.bucket, Key=f"codex/{OTHER}/{'0' * 64}.tar.gz", Body=b"orphan"
    )
    later = timezone.now() + timedelta(hours=2)

    dry = session_records_prune(dry_run=True, now=later)
    assert (dry.records_deleted, dry.objects_deleted) == (0, 1)
    assert len(bucket_keys(session_bucket)) == 2
    # the orphan is younger than an hour: a store may be about to name it
    assert session_records_prune().objects_deleted == 0

    report = session_records_prune(now=later)
    assert (report.records_deleted, report.objects_deleted) == (0, 1)
    assert bucket_keys(session_bucket) == [f"codex/{CodexSession.objects.get().object_name}"]

    call_command("codex_sessions_prune", "--idle-days", "1")  # updated just now: kept
    assert CodexSession.objects.count() == 1
    CodexSession.objects.update(updated_at=timezone.now() - timedelta(days=2))
    call_command("codex_sessions_prune", "--idle-days", "1")
    assert "deleted 1 records and 1 objects" in capsys.readouterr().out
    assert (CodexSession.objects.count(), bucket_keys(session_bucket)) == (0, [])


def test_a_deleted_task_takes_its_stored_session_with_it(running_task, tmp_path):
    session_record_write(
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


# --- One run's session store: a database blip while writing ----------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_store_the_database_refused_is_retried(running_task, tmp_path, settings, monkeypatch):
    settings.WORKER_CODEX_SESSION_STORE_RETRY_SECONDS = 5
    real, calls = session_store.session_record_write, []

    def refused_once(**kwargs):
        calls.append(kwargs["turn"])
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    monkeypatch.setattr(session_store, "session_record_write", refused_once)
    write_rollout(tmp_path)
    store = SessionStore(RunHolder(task_id=running_task.pk, worker_id="w1", turn=1))

    assert store.store(thread_id=THREAD, home=tmp_path) == "stored"
    assert calls == [1, 1]
    assert CodexSession.objects.get().turn == 1


@pytest.mark.django_db(transaction=True)
def test_a_store_the_database_keeps_refusing_gives_up_without_raising(
    running_task, tmp_path, settings, monkeypatch
):
    settings.WORKER_CODEX_SESSION_STORE_RETRY_SECONDS = 1

    def refused(**kwargs):
        raise OperationalError("the database system is shutting down")

    monkeypatch.setattr(session_store, "session_record_write", refused)
    write_rollout(tmp_path)
    store = SessionStore(RunHolder(task_id=running_task.pk, worker_id="w1", turn=1))

    assert store.store(thread_id=THREAD, home=tmp_path) is None
    assert not CodexSession.objects.exists()


def test_the_admin_lists_stored_sessions_without_their_bytes(
    running_task, tmp_path, client, django_user_model
):
    session_record_write(
        task_id=running_task.pk, worker_id="w1", turn=1, archive=archive_of(tmp_path)
    )
    admin = django_user_model.objects.create_superuser("root", password="pw-for-tests")
    client.force_login(admin)
    listing = client.get("/admin/worker/codexsession/")
    detail = client.get(f"/admin/worker/codexsession/{CodexSession.objects.get().pk}/change/")
    assert listing.status_code == detail.status_code == 200
    assert THREAD in listing.content.decode()
    assert b'name="data"' not in detail.content
