"""Task keys: the credential a running task's agent holds for the memory tool.

A key is `cpm_` and 43 URL-safe characters (32 random bytes), minted by the worker's claim
and handed to the agent's process only; its SHA-256 is stored in auto memory's row of the
task (`TaskMemoryState`), with the time of the claim that minted it. It is not the user's API
token and grants nothing of the API: it names one task, and it works only while that task's
turn runs under the claim that minted it (`Task.claimed_at` equal to the stored time), and
only while the task's user may still read the task's project. A finished, failed or
re-queued turn is no longer running, and a re-claimed one has another claim time (and a new
key), so the key is refused from then on without a write of its own.

The key is stored in the claim's own statement on PostgreSQL (`key_store_cte`); SQLite has
no data-modifying CTEs, so there the injection's transaction stores it with the injected ids,
or, when nothing is injected, one upsert does (`task_key_store`).
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from django.db import connection
from django.db.models import F

from automemory.models import TaskMemoryState
from controlplane.access import task_user_may_read, task_user_role
from controlplane.models import Task, TaskStatus
from controlplane.rawsql import column, table

TASK_KEY_PREFIX = "cpm_"
# The environment variable that carries a turn's key to the agent's memory server.
TASK_KEY_ENV = "CONTROLPLANE_MEMORY_TOKEN"
TASK_KEY = re.compile(r"cpm_[A-Za-z0-9_-]{43}")


class TaskKeyInvalid(Exception):
    """The key is malformed, unknown, or its task's turn is over."""


@dataclass(frozen=True)
class MintedTaskKey:
    key: str  # given to the agent's process, never stored
    key_hash: str  # stored in the task's `TaskMemoryState` with the claim's time


def task_key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def task_key_new() -> MintedTaskKey:
    """A fresh random key and its hash (the claim stores the hash)."""
    key = TASK_KEY_PREFIX + secrets.token_urlsafe(32)
    return MintedTaskKey(key=key, key_hash=task_key_hash(key))


def task_key_authenticate(*, key: str) -> Task:
    """The running task this key was minted for; `TaskKeyInvalid` when the key is malformed
    or unknown, the task is no longer running under that claim, or its user may no longer
    read its project (removed from it) or is inactive.

    One indexed read, with the task's user and their role in the task's project: every
    memory tool call makes it, so a user removed from a project loses their running task's
    memory tools at their next call, whatever server answers it.
    """
    if not isinstance(key, str) or not TASK_KEY.fullmatch(key):
        raise TaskKeyInvalid("Invalid task key.")
    key_hash = task_key_hash(key)
    task = (
        Task.objects.select_related("user", "auto_memory_state")
        .annotate(user_role=task_user_role())
        .filter(
            auto_memory_state__memory_key_hash=key_hash,
            auto_memory_state__key_claimed_at=F("claimed_at"),
            status=TaskStatus.RUNNING,
        )
        .first()
    )
    if task is None or not hmac.compare_digest(task.auto_memory_state.memory_key_hash, key_hash):
        raise TaskKeyInvalid("Invalid task key, or its task is not running.")
    if not task.user.is_active:
        raise TaskKeyInvalid("The task's user is inactive.")
    if not task_user_may_read(task.user_role):
        raise TaskKeyInvalid("The task's user is no longer a member of its project.")
    return task


def _state_columns() -> dict[str, str]:
    return {
        name: column(TaskMemoryState, name)
        for name in ("task", "memory_key_hash", "key_claimed_at", "injected_memory_ids")
    }


def key_store_cte(*, source: str, key_hash: str, claimed_at) -> tuple[str, list]:
    """PostgreSQL: a data-modifying CTE body that stores `key_hash` (and the claim's time)
    for the task `source` returns (its `id` column): the claim's own statement stores it."""
    cols = _state_columns()
    sql = (
        f"INSERT INTO {table(TaskMemoryState)} ({cols['task']}, {cols['memory_key_hash']},"
        f" {cols['key_claimed_at']}, {cols['injected_memory_ids']})"
        f" SELECT {source}.{column(Task, 'id')}, %s, %s, '[]' FROM {source}"
        f" ON CONFLICT ({cols['task']}) DO UPDATE SET"
        f" {cols['memory_key_hash']} = EXCLUDED.{cols['memory_key_hash']},"
        f" {cols['key_claimed_at']} = EXCLUDED.{cols['key_claimed_at']}"
    )
    return sql, [key_hash, connection.ops.adapt_datetimefield_value(claimed_at)]


def key_stored_by_claim() -> bool:
    """Whether the claim's statement stores the key itself (data-modifying CTEs)."""
    return connection.vendor == "postgresql"


def task_state_store(
    *,
    task_id: int,
    key_hash: str | None = None,
    claimed_at=None,
    injected_memory_ids: list[int] | None = None,
) -> None:
    """Store a task's key (with its claim's time) and/or its injected ids in one upsert;
    what is not given keeps its stored value."""
    cols = _state_columns()
    sets = []
    if key_hash is not None:
        sets += [cols["memory_key_hash"], cols["key_claimed_at"]]
    if injected_memory_ids is not None:
        sets.append(cols["injected_memory_ids"])
    if not sets:
        return
    field = TaskMemoryState._meta.get_field("injected_memory_ids")
    params = [
        task_id,
        key_hash or "",
        connection.ops.adapt_datetimefield_value(claimed_at if key_hash else None),
        field.get_db_prep_save(injected_memory_ids or [], connection),
    ]
    updates = ", ".join(f"{name} = excluded.{name}" for name in sets)
    sql = (
        f"INSERT INTO {table(TaskMemoryState)} ({cols['task']}, {cols['memory_key_hash']},"
        f" {cols['key_claimed_at']}, {cols['injected_memory_ids']}) VALUES (%s, %s, %s, %s)"
        f" ON CONFLICT ({cols['task']}) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
