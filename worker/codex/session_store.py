"""The session store: a codex thread's session records, so the thread resumes on any worker.

Words used here and in docs/codex.md, one meaning each:

- a *session file* is one rollout file the CLI writes for a thread under a `CODEX_HOME`;
- a *session archive* is all session files of a thread as one tar (`worker.codex.session_files`);
- a *session record* is the thread's one `CodexSession` row: its latest archive (compressed,
  in the row itself with `WORKER_CODEX_SESSION_STORAGE=database`, the default, or in object
  storage under an `s3://` URL, through django-storages), or why the archive is not held;
- the *session store* is this module: `session_record_write` after every codex run,
  `session_record_restore` before a resume, `session_records_prune` for retention, and
  `SessionStore`, the three bound to one run's holder, which the codex executor uses.

The session record is the authority: a local copy is used as it is only when its checksum
equals the record's (or when no record was ever written for the thread). A record is written
only by the worker that still holds the task, in the transaction that checks it, so a worker
whose task was taken over cannot overwrite the new holder's record with its discarded run.
The `codex_sessions_prune` command deletes idle session records.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from controlplane.models import Task, TaskStatus
from worker import metrics
from worker.blob_storage import blob_storage_kind, object_storage
from worker.codex.session_files import (
    SessionArchive,
    SessionArchiveError,
    session_archive_build,
    session_archive_extract,
    session_archive_open,
)
from worker.executors.base import RunHolder
from worker.models import CodexSession, SessionStorage

logger = logging.getLogger(__name__)

# Restore outcomes: the local copy is the session record's state; the record's archive was
# written into CODEX_HOME; no record, the local copy is used; nothing anywhere (the CLI
# decides).
RESTORE_OUTCOMES = ("current", "restored", "local_only", "absent")
ORPHAN_GRACE = timedelta(hours=1)


class SessionRecordError(Exception):
    """The thread's session record cannot be used to resume it; the message says why."""


def _object_name(archive: SessionArchive) -> str:
    """Named by content: storing the same state twice writes one object."""
    return f"{archive.thread_id}/{archive.sha256}.tar.gz"


# --- Writing ----------------------------------------------------------------------------------


def session_record_write(
    *,
    task_id: int,
    worker_id: str,
    turn: int,
    archive: SessionArchive,
    claimed_at: datetime | None = None,
    now: datetime | None = None,
) -> str:
    """Store the thread's state after a run of `turn`, if `worker_id` still holds the task
    (under the claim made at `claimed_at`, when given: the fence every write of a run checks).

    Returns `stored`; `not_held` when the row now records the state without its bytes (over
    WORKER_CODEX_SESSION_MAX_BYTES, or object storage failed; `error` says which); or
    `not_owner` when the task is no longer this worker's (nothing written).
    """
    now = now or timezone.now()
    kind = blob_storage_kind()
    limit = settings.WORKER_CODEX_SESSION_MAX_BYTES
    values = {
        "turn": turn,
        "sha256": archive.sha256,
        "size": archive.size,
        "file_count": len(archive.names),
        "storage": kind,
        "stored_size": None,
        "data": None,
        "object_name": "",
        "error": "",
        "updated_at": now,
    }
    if archive.size > limit:
        values["error"] = (
            f"its session files are {archive.size} bytes, over WORKER_CODEX_SESSION_MAX_BYTES "
            f"({limit})"
        )
    else:
        compressed = archive.compressed()
        values["stored_size"] = len(compressed)
        if kind == SessionStorage.DATABASE:
            values["data"] = compressed
        else:
            try:
                values["object_name"] = _object_put(archive=archive, data=compressed)
            except Exception as exc:  # any storage backend's error: the reason is recorded
                logger.warning("codex session %s: object storage failed", archive.thread_id)
                values.update(stored_size=None, error=f"object storage failed: {_describe(exc)}")
    with transaction.atomic():
        held = Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING, worker_id=worker_id)
        if claimed_at is not None:
            held = held.filter(claimed_at=claimed_at)
        owned = held.select_for_update().exists()
        previous = None
        if owned:
            previous = (
                CodexSession.objects.select_for_update()
                .filter(thread_id=archive.thread_id)
                .values_list("object_name", flat=True)
                .first()
            )
            CodexSession.objects.update_or_create(
                thread_id=archive.thread_id,
                defaults={"task_id": task_id, **values},
                create_defaults={"task_id": task_id, "created_at": now, **values},
            )
    new_object = values["object_name"]
    if not owned:
        if new_object:
            _object_delete_unless_used(new_object)
        return "not_owner"
    if previous and previous != new_object:
        _object_delete_unless_used(previous)
    return "stored" if values["stored_size"] is not None else "not_held"


def _object_put(*, archive: SessionArchive, data: bytes) -> str:
    storage = object_storage()
    name = _object_name(archive)
    if storage.exists(name):
        return name
    return storage.save(name, ContentFile(data))


def _object_delete_unless_used(name: str) -> None:
    """Delete an object no row names any more; a failure leaves it to `codex_sessions_prune`."""
    try:
        if not CodexSession.objects.filter(object_name=name).exists():
            object_storage().delete(name)
    except Exception:
        logger.warning("could not delete codex session object %s", name, exc_info=True)


# --- Restoring --------------------------------------------------------------------------------


def session_record_restore(*, thread_id: str, home: Path) -> str:
    """Make `home` hold the thread's stored state before a resume; one of RESTORE_OUTCOMES.

    Raises SessionRecordError when the session record cannot be used: not held (and why),
    its object missing from object storage, or corrupt (it does not decompress, its size or
    SHA-256 differs from the row's, it holds something else than the thread's session files).
    """
    stored = CodexSession.objects.defer("data").filter(thread_id=thread_id).first()
    local = session_archive_build(thread_id=thread_id, home=home)
    if stored is None:
        return "local_only" if local is not None else "absent"
    if local is not None and local.sha256 == stored.sha256:
        return "current"
    label = f"the session record of codex thread {thread_id} (stored after turn {stored.turn})"
    if stored.stored_size is None:
        raise SessionRecordError(f"{label} is not held: {stored.error}")
    compressed = _payload_read(stored, label=label)
    try:
        archive = session_archive_open(
            thread_id=thread_id, compressed=compressed, sha256=stored.sha256, size=stored.size
        )
    except SessionArchiveError as exc:
        raise SessionRecordError(f"{label} is corrupt: {exc}") from None
    session_archive_extract(archive=archive, home=home)
    return "restored"


def _payload_read(stored: CodexSession, *, label: str) -> bytes:
    if stored.storage == SessionStorage.DATABASE:
        data = CodexSession.objects.filter(pk=stored.pk).values_list("data", flat=True).first()
        if data is None:
            raise SessionRecordError(f"{label} is missing: the row holds no bytes")
        return bytes(data)
    try:
        with object_storage().open(stored.object_name, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise SessionRecordError(
            f"{label} is missing: object storage has no {stored.object_name}"
        ) from None
    except Exception as exc:
        if _is_not_found(exc):
            raise SessionRecordError(
                f"{label} is missing: object storage has no {stored.object_name}"
            ) from None
        raise SessionRecordError(
            f"{label} could not be read from object storage: {_describe(exc)}"
        ) from None


def _is_not_found(exc: Exception) -> bool:
    """boto3's ClientError for a missing key (404, NoSuchKey), without importing boto3."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = str((response.get("Error") or {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


# --- One run's session store ---------------------------------------------------------------


@dataclass(frozen=True)
class SessionStore:
    """The session store of one run, bound to its holder (`ExecutionControl.holder`: the task,
    the worker holding it, the claim's time, the fence, and the turn): `restore` before a
    resume, `store` after the run. Both time themselves, log and count (the
    worker_codex_session_* metrics)."""

    holder: RunHolder

    def restore(self, *, thread_id: str, home: Path) -> str:
        """One of RESTORE_OUTCOMES; raises SessionRecordError with the reason it cannot."""
        started = time.perf_counter()
        try:
            outcome = session_record_restore(thread_id=thread_id, home=home)
        except SessionRecordError:
            metrics.session_restores.labels("failed").inc()
            raise
        except (DatabaseError, OSError) as exc:
            metrics.session_restores.labels("failed").inc()
            raise SessionRecordError(
                f"the session record of codex thread {thread_id} could not be read: "
                f"{_describe(exc)}"
            ) from None
        seconds = time.perf_counter() - started
        metrics.session_restores.labels(outcome).inc()
        metrics.session_seconds.labels("restore").observe(seconds)
        logger.info(
            "codex session %s before turn %s: %s in %.3fs",
            thread_id,
            self.holder.turn,
            outcome,
            seconds,
        )
        return outcome

    def store(self, *, thread_id: str, home: Path) -> str | None:
        """Store the thread's files after the run; the outcome, or None when nothing was stored
        (no files, or it failed: logged, counted, never raised: the run's result stands)."""
        started = time.perf_counter()
        try:
            archive = session_archive_build(thread_id=thread_id, home=home)
        except OSError:
            logger.warning("codex session %s: could not read its files", thread_id, exc_info=True)
            metrics.session_stores.labels("failed").inc()
            return None
        if archive is None:
            logger.warning("codex session %s: no session file under %s", thread_id, home)
            metrics.session_stores.labels("no_files").inc()
            return None
        outcome = self._store_retrying(archive)
        seconds = time.perf_counter() - started
        metrics.session_stores.labels(outcome or "failed").inc()
        if outcome is None:
            return None
        metrics.session_seconds.labels("store").observe(seconds)
        logger.info(
            "codex session %s after turn %s: %s, %d bytes (%d files) in %.3fs",
            thread_id,
            self.holder.turn,
            outcome,
            archive.size,
            len(archive.names),
            seconds,
        )
        return outcome

    def _store_retrying(self, archive: SessionArchive) -> str | None:
        """Retry a store the database refused (a restart, a dropped connection) for up to
        WORKER_CODEX_SESSION_STORE_RETRY_SECONDS: the turn's finish comes after it."""
        deadline = time.monotonic() + settings.WORKER_CODEX_SESSION_STORE_RETRY_SECONDS
        delay = 0.5
        while True:
            try:
                return session_record_write(
                    task_id=self.holder.task_id,
                    worker_id=self.holder.worker_id,
                    turn=self.holder.turn,
                    archive=archive,
                    claimed_at=self.holder.claimed_at,
                )
            except DatabaseError as exc:
                if time.monotonic() + delay > deadline or connection.in_atomic_block:
                    logger.error(
                        "codex session %s: not stored after turn %s (%s); a resume on another "
                        "worker will fail until a later turn stores it",
                        archive.thread_id,
                        self.holder.turn,
                        _describe(exc),
                    )
                    return None
                logger.warning(
                    "codex session %s: store failed (%s); retrying in %.1fs",
                    archive.thread_id,
                    _describe(exc),
                    delay,
                )
                time.sleep(delay)
                close_old_connections()  # a broken connection is replaced
                delay = min(delay * 2, 5.0)


# --- Retention --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneReport:
    records_deleted: int = 0
    objects_deleted: int = 0


def session_records_prune(
    *,
    idle_before: datetime | None = None,
    orphans: bool = True,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneReport:
    """Delete session records not updated since `idle_before` (their threads then resume only
    where a local copy is), and, with `orphans`, objects in object storage that no row names
    (those of deleted tasks, or of a store interrupted between upload and commit) older than
    an hour."""
    sessions = 0
    doomed_objects: list[str] = []
    if idle_before is not None:
        stale = CodexSession.objects.filter(updated_at__lt=idle_before)
        doomed_objects += [name for name in stale.values_list("object_name", flat=True) if name]
        sessions = stale.count() if dry_run else stale.delete()[0]
    if orphans and blob_storage_kind() == SessionStorage.OBJECT:
        doomed_objects += _orphan_objects(written_before=(now or timezone.now()) - ORPHAN_GRACE)
    deleted = 0
    for name in dict.fromkeys(doomed_objects):
        if not dry_run:
            _object_delete_unless_used(name)
        deleted += 1
    return PruneReport(records_deleted=sessions, objects_deleted=deleted)


def _orphan_objects(*, written_before: datetime) -> list[str]:
    """Objects `<thread>/<sha256>.tar.gz` that no row names, written before `written_before`
    (a younger one may belong to a store that has uploaded but not yet committed its row)."""
    storage = object_storage()
    threads, _ = storage.listdir("")
    orphans = []
    for thread in threads:
        _, files = storage.listdir(thread)
        names = [f"{thread}/{name}" for name in files]
        used = set(
            CodexSession.objects.filter(object_name__in=names).values_list("object_name", flat=True)
        )
        orphans += [
            name
            for name in names
            if name not in used and storage.get_modified_time(name) < written_before
        ]
    return orphans
