"""Task keys: the credential a running task's agent holds for the memory tool.

A key is `cpm_` and 43 URL-safe characters (32 random bytes), minted by the worker's claim
(its SHA-256 goes into the claim's own statement, `Task.memory_key_hash`: no statement of
its own) and handed to the agent's process only. It is not the user's API token and grants
nothing of the API: it names one task, and it works only while that task's turn runs under
the claim that minted it, and only while the task's user may still read the task's project.
A finished, failed, re-queued or re-claimed turn clears or replaces the hash, so the key is
refused from then on.
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from controlplane.access import task_user_may_read, task_user_role
from controlplane.models import Task, TaskStatus

TASK_KEY_PREFIX = "cpm_"
# The environment variable that carries a turn's key to the agent's memory server.
TASK_KEY_ENV = "CONTROLPLANE_MEMORY_TOKEN"
TASK_KEY = re.compile(r"cpm_[A-Za-z0-9_-]{43}")


class TaskKeyInvalid(Exception):
    """The key is malformed, unknown, or its task's turn is over."""


@dataclass(frozen=True)
class MintedTaskKey:
    key: str  # given to the agent's process, never stored
    key_hash: str  # stored on the task by the claim


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
        Task.objects.select_related("user")
        .annotate(user_role=task_user_role())
        .filter(memory_key_hash=key_hash, status=TaskStatus.RUNNING)
        .first()
    )
    if task is None or not hmac.compare_digest(task.memory_key_hash, key_hash):
        raise TaskKeyInvalid("Invalid task key, or its task is not running.")
    if not task.user.is_active:
        raise TaskKeyInvalid("The task's user is inactive.")
    if not task_user_may_read(task.user_role):
        raise TaskKeyInvalid("The task's user is no longer a member of its project.")
    return task
