"""A task's branch between turns: stored after each turn that changed files, restored before
the next turn on whichever host runs it.

Stored by pushing `controlplane/task-<id>` to the repository's remote when
`WORKER_TASK_BRANCH_PUSH` is on and the remote takes it (the credential may write), else as a
git bundle of the branch's commits since the base commit, kept where codex session archives
are kept (`worker.blob_storage`: the database, or object storage). The `TaskBranch` row says
which; it is written only by the worker still holding the task, as session records are.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from controlplane.git import GitError, Remote, git_run, private_dir, remote_env
from controlplane.models import Task, TaskStatus
from controlplane.services.mirrors import commit_present, git_dir_env, remote_fetch
from worker.blob_storage import blob_storage_kind, object_storage
from worker.models import BranchStorage, SessionStorage, TaskBranch
from worker.workspace.checkouts import TaskPaths

logger = logging.getLogger(__name__)


class BranchError(Exception):
    """The task's branch could not be stored or restored; the message says why."""


def _object_name(task_id: int, sha256: str) -> str:
    return f"task-branches/task-{int(task_id)}/{sha256}.bundle"


def _push(paths: TaskPaths, *, remote: Remote, head: str) -> str:
    """Push `head` to the remote's `controlplane/task-<id>`; "" when it went, else why not."""
    try:
        with remote_env(remote) as access:
            git_run(
                ["push", "--force", "--quiet", remote.url.url, f"{head}:refs/heads/{paths.branch}"],
                env={**git_dir_env(paths.git_dir), **access},
                timeout=settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS,
                secrets=[remote.credential],
            )
    except GitError as exc:
        return str(exc)
    return ""


def _bundle(paths: TaskPaths, *, base: str) -> bytes:
    """The branch's commits since `base` as one git bundle."""
    limit = settings.WORKER_TASK_BUNDLE_MAX_BYTES
    with _scratch_file() as bundle:
        git_run(
            ["bundle", "create", "--quiet", str(bundle), f"refs/heads/{paths.branch}", f"^{base}"],
            env=git_dir_env(paths.git_dir),
            timeout=settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS,
        )
        size = bundle.stat().st_size
        if size > limit:
            raise BranchError(
                f"the turn's changes make a bundle of {size} bytes, over "
                f"WORKER_TASK_BUNDLE_MAX_BYTES ({limit}), and could not be pushed either"
            )
        return bundle.read_bytes()


@contextlib.contextmanager
def _scratch_file():
    descriptor, name = tempfile.mkstemp(dir=private_dir(), prefix="bundle-", suffix=".bundle")
    os.close(descriptor)
    os.unlink(name)  # git bundle create writes it anew
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def branch_store(
    paths: TaskPaths,
    *,
    remote: Remote,
    base: str,
    head: str,
    turn: int,
    worker_id: str,
    claimed_at: datetime | None,
) -> str:
    """Keep the task's branch at `head` for the next turn on any host; the storage used
    (`remote`, `database`, `object`), or `not_owner` when the task is no longer this
    worker's (nothing kept). BranchError says why it could not be kept."""
    values = {"turn": turn, "base_commit": base, "head_commit": head, "updated_at": timezone.now()}
    refused = _push(paths, remote=remote, head=head) if settings.WORKER_TASK_BRANCH_PUSH else "off"
    new_object = ""
    if not refused:
        values.update(storage=BranchStorage.REMOTE, size=0, sha256="", data=None, object_name="")
    else:
        if refused != "off":
            logger.info(
                "task %s: its branch was not pushed (%s); storing a bundle", paths.task_id, refused
            )
        data = _bundle(paths, base=base)
        sha256 = hashlib.sha256(data).hexdigest()
        values.update(size=len(data), sha256=sha256)
        if blob_storage_kind() == SessionStorage.DATABASE:
            values.update(storage=BranchStorage.DATABASE, data=data, object_name="")
        else:
            storage = object_storage()
            name = _object_name(paths.task_id, sha256)
            try:
                new_object = name if storage.exists(name) else storage.save(name, ContentFile(data))
            except Exception as exc:
                raise BranchError(
                    f"object storage failed: {type(exc).__name__}: {exc}"[:500]
                ) from None
            values.update(storage=BranchStorage.OBJECT, data=None, object_name=new_object)
    with transaction.atomic():
        held = Task.objects.filter(pk=paths.task_id, status=TaskStatus.RUNNING, worker_id=worker_id)
        if claimed_at is not None:
            held = held.filter(claimed_at=claimed_at)
        owned = held.select_for_update().exists()
        previous = ""
        if owned:
            if blob_storage_kind() == SessionStorage.OBJECT:
                previous = (
                    TaskBranch.objects.filter(task_id=paths.task_id)
                    .values_list("object_name", flat=True)
                    .first()
                    or ""
                )
            TaskBranch.objects.bulk_create(
                [TaskBranch(task_id=paths.task_id, **values)],
                update_conflicts=True,
                unique_fields=["task"],
                update_fields=list(values),
            )
    stale = new_object if not owned else (previous if previous != new_object else "")
    if stale:
        with contextlib.suppress(Exception):
            if not TaskBranch.objects.filter(object_name=stale).exists():
                object_storage().delete(stale)
    return values["storage"] if owned else "not_owner"


def branch_restore(paths: TaskPaths, *, remote: Remote, head: str) -> str:
    """Make the task's git folder hold commit `head` (the task's last finished turn) before
    the next turn: `present` (this host has it), `fetched` (from the remote) or
    `unbundled`. BranchError says why it cannot."""
    if commit_present(paths.git_dir, head):
        return "present"
    stored = TaskBranch.objects.defer("data").filter(task_id=paths.task_id).first()
    if stored is None:
        raise BranchError(
            f"its branch at {head} is on no host and was never stored (a turn's changes lost)"
        )
    refspec = f"+refs/heads/{paths.branch}:refs/heads/{paths.branch}"
    timeout = settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS
    try:
        if stored.storage == BranchStorage.REMOTE:
            remote_fetch(paths.git_dir, remote, [refspec], timeout=timeout)
            outcome = "fetched"
        else:
            data = _bundle_read(stored)
            with _scratch_file() as bundle:
                bundle.write_bytes(data)
                env = git_dir_env(paths.git_dir)
                verified = git_run(
                    ["bundle", "verify", "--quiet", str(bundle)],
                    env=env,
                    timeout=timeout,
                    check=False,
                )
                if verified.returncode != 0:
                    raise BranchError(
                        f"its stored changes need commit {stored.base_commit}, which the "
                        f"remote no longer has (was {remote.url.url} force-pushed?)"
                    )
                git_run(
                    [
                        "fetch",
                        "--no-tags",
                        "--no-write-fetch-head",
                        "--quiet",
                        str(bundle),
                        refspec,
                    ],
                    env=env,
                    timeout=timeout,
                )
            outcome = "unbundled"
    except GitError as exc:
        raise BranchError(
            f"its branch could not be restored from {stored.storage}: {exc}"
        ) from None
    if not commit_present(paths.git_dir, head):
        raise BranchError(
            f"its stored branch (turn {stored.turn}, {stored.storage}) does not hold commit {head}"
        )
    return outcome


def _bundle_read(stored: TaskBranch) -> bytes:
    if stored.storage == BranchStorage.DATABASE:
        data = TaskBranch.objects.filter(pk=stored.pk).values_list("data", flat=True).first()
    else:
        try:
            with object_storage().open(stored.object_name, "rb") as handle:
                data = handle.read()
        except Exception as exc:
            raise BranchError(
                f"its bundle {stored.object_name} could not be read from object storage: "
                f"{type(exc).__name__}"
            ) from None
    data = bytes(data or b"")
    if hashlib.sha256(data).hexdigest() != stored.sha256:
        raise BranchError(f"its stored bundle (turn {stored.turn}) is corrupt: its SHA-256 differs")
    return data
