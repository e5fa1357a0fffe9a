"""Reads the auto memory tests share."""

from automemory.models import AutoMemoryLog
from controlplane.models import IdentityMemory, MemorySource


def log_of(task) -> AutoMemoryLog:
    """The task's extraction log row."""
    return AutoMemoryLog.objects.get(task=task)


def auto_memories(**filters):
    """The auto memories, narrowed by `filters`."""
    return IdentityMemory.objects.filter(source=MemorySource.AUTO, **filters)
