"""Auto memory's own state of the host's tasks, kept out of the host's tables.

The host's `Task` knows nothing of auto memory: the memory tool key of a task's running turn
and the memories injected into its first turn live here, one row per task that has either
(written by the worker's claim and by the injector).
"""

from django.db import models
from django.db.models import Q

from controlplane.models import Task


class TaskMemoryState(models.Model):
    """A task's memory tool key and injected memories.

    `memory_key_hash` is the SHA-256 of the key minted by the claim of the task's running
    turn (`automemory.services.task_keys`), and `key_claimed_at` that claim's time: the key
    works only while the task runs under that very claim (`Task.claimed_at`), so a finished,
    re-queued or re-claimed turn refuses it without a write of its own. The hash is unique
    across tasks (a partial unique constraint: empty means no key).
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_state"
    )
    memory_key_hash = models.CharField(max_length=64, blank=True, default="")
    key_claimed_at = models.DateTimeField(null=True, blank=True)
    # Memories whose text was prepended to the first turn's in-memory prompt.
    injected_memory_ids = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "automemory_task_state"
        verbose_name = "task auto memory state"
        constraints = [
            # The memory tool finds a running task by its key's hash.
            models.UniqueConstraint(
                fields=["memory_key_hash"],
                condition=~Q(memory_key_hash=""),
                name="task_state_memory_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"auto memory state of task {self.task_id}"

    @property
    def injected_ids(self) -> list[int]:
        """The memory ids of `injected_memory_ids`, in order, without repeats."""
        return injected_ids_of(self.injected_memory_ids)


def injected_ids_of(values) -> list[int]:
    """The positive integers of a stored `injected_memory_ids` list, in order, without
    repeats; anything else (a list written by hand, an odd import) is ignored."""
    values = values if isinstance(values, list) else []
    ids = (v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0)
    return list(dict.fromkeys(ids))


def task_injected_ids(task: Task) -> list[int]:
    """The memories injected into `task`'s first turn (its `TaskMemoryState`; none without
    one). No query when the row was read with the task (`select_related`)."""
    try:
        state = task.auto_memory_state
    except TaskMemoryState.DoesNotExist:
        return []
    return state.injected_ids


def tasks_injected_ids(tasks) -> dict[int, list[int]]:
    """Per task id, the memories injected into its first turn, for a batch of tasks: one
    query for those whose row was not read with them, none when all were."""
    found: dict[int, list[int]] = {}
    unread = []
    for task in tasks:
        if Task.auto_memory_state.is_cached(task):
            found[task.pk] = task_injected_ids(task)
        else:
            unread.append(task.pk)
    if unread:
        rows = TaskMemoryState.objects.filter(task_id__in=unread).values_list(
            "task_id", "injected_memory_ids"
        )
        for task_id, values in rows:
            found[task_id] = injected_ids_of(values)
    return {task.pk: found.get(task.pk, []) for task in tasks}
