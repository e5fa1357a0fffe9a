"""Reads for auto memory: what a task's first turn receives, and a user's extraction log."""

from django.db.models import QuerySet

from automemory import conf
from automemory.models import AutoMemoryLog
from controlplane.models import IdentityMemory, MemoryScope, MemoryStatus


def memories_for_injection(
    *, user_id: int, project_id: int
) -> tuple[list[IdentityMemory], list[IdentityMemory]]:
    """The newest active user-level memories of the user and project-level ones of the project.

    Two indexed queries (partial indexes on active memories by creation time), whatever the
    number of memories stored.
    """
    newest = ("-created_at", "-id")
    user_memories = list(
        IdentityMemory.objects.filter(
            scope=MemoryScope.USER, user_id=user_id, status=MemoryStatus.ACTIVE
        ).order_by(*newest)[: conf.get("INJECT_USER_LIMIT")]
    )
    project_memories = list(
        IdentityMemory.objects.filter(
            scope=MemoryScope.PROJECT, project_id=project_id, status=MemoryStatus.ACTIVE
        ).order_by(*newest)[: conf.get("INJECT_PROJECT_LIMIT")]
    )
    return user_memories, project_memories


def auto_memory_log_list(*, user) -> QuerySet[AutoMemoryLog]:
    """The extraction log of the tasks the user created, newest attempt first."""
    return AutoMemoryLog.objects.filter(user=user).order_by("-last_attempt_at", "-task_id")
