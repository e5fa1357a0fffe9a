"""Where the worker keeps what it stores centrally (codex session archives, task branch
bundles): in the database rows themselves, or in object storage.

One setting decides for both, `WORKER_CODEX_SESSION_STORAGE`: `database`, or an `s3://` URL
that settings.py turns into the `codex_sessions` entry of Django's STORAGES.
"""

from __future__ import annotations

from django.conf import settings
from django.core.files.storage import Storage, storages

from worker.models import SessionStorage

# The entry of Django's STORAGES that holds the objects when they go to object storage.
OBJECT_STORAGE_ALIAS = "codex_sessions"


def blob_storage_kind() -> str:
    """Where new blobs go: `database` or `object` (WORKER_CODEX_SESSION_STORAGE)."""
    if settings.WORKER_CODEX_SESSION_STORAGE == SessionStorage.DATABASE:
        return SessionStorage.DATABASE
    return SessionStorage.OBJECT


def object_storage() -> Storage:
    """The object storage backend (only when `blob_storage_kind()` is `object`)."""
    return storages[OBJECT_STORAGE_ALIAS]
