"""Auto memory's own state of the host's tasks and memories, kept out of the host's tables.

The host's `Task` knows nothing of auto memory: the memory tool key of a task's running turn
and the memories injected into its first turn live here, one row per task that has either
(written by the worker's claim and by the injector). Nor does its `IdentityMemory`: the
usage counters, the report hold, the instruction flags and their approval live here, one
row per memory that has any.
"""

from django.conf import settings
from django.db import models
from django.db.models import ExpressionWrapper, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from controlplane.models import IdentityMemory, Task


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


class MemoryState(models.Model):
    """Auto memory's own state of a memory: its usage counters, the report hold, and the
    instruction flags of its text with their approval.

    One row per memory that was ever injected, cited, reported or flagged, written by the
    injector and by feedback (`automemory.services.feedback`) in the transactions that move
    the counters, and by whatever writes the memory's text (the extraction's writer, the
    host's memory services through the hook auto memory registers) in that write's
    transaction; a memory without a row has zero counts, no hold and no flag (readers join
    it with LEFT JOIN and COALESCE: `memory_usage`, `ranking`). The host's memory table
    knows nothing of them.
    """

    memory = models.OneToOneField(
        IdentityMemory, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_state"
    )
    # How many tasks the memory was injected into, and when last; how many tasks cited it
    # as used (a `Memories used:` line, or the memory tool's cite), and when last; how many
    # reports said it misled (`wrong`, `outdated`, `unsafe`), and when last.
    injection_count = models.PositiveIntegerField(default=0)
    last_injected_at = models.DateTimeField(null=True, blank=True)
    cite_count = models.PositiveIntegerField(default=0)
    last_cited_at = models.DateTimeField(null=True, blank=True)
    report_count = models.PositiveIntegerField(default=0)
    last_reported_at = models.DateTimeField(null=True, blank=True)
    # Set by a report: the memory is held out of injection and search until a project owner
    # reviews it (approves it, edits it or deletes it).
    report_hold_at = models.DateTimeField(null=True, blank=True)
    # Text that reads like instructions to the agent ("ignore previous instructions", role
    # tags...: `controlplane.services.instructions`). A flagged memory is injected only once
    # a project owner approved it (an owner's own text is approved by its author when
    # written); new text needs a new approval.
    instruction_flags = models.JSONField(default=list, blank=True)
    flagged = models.BooleanField(default=False)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_memory_states",
    )

    class Meta:
        db_table = "automemory_memory_state"
        verbose_name = "memory auto memory state"
        constraints = [
            models.CheckConstraint(
                condition=Q(approved_at__isnull=True) | Q(flagged=True),
                name="memory_state_approval_needs_flag",
            ),
        ]

    def __str__(self) -> str:
        return f"auto memory state of memory {self.memory_id}"

    @property
    def awaiting_approval(self) -> bool:
        """A flagged memory no owner has approved yet: it is not injected."""
        return memory_awaiting_approval(flagged=self.flagged, approved_at=self.approved_at)


def memory_awaiting_approval(*, flagged, approved_at) -> bool:
    """The rule of `MemoryState.awaiting_approval`, for values read without the model (a
    memory without a row reads `flagged` as None or False)."""
    return bool(flagged) and approved_at is None


# The counters of `MemoryState`, and what a memory without a row has.
MEMORY_USAGE_DEFAULTS = {
    "injection_count": 0,
    "last_injected_at": None,
    "cite_count": 0,
    "last_cited_at": None,
    "report_count": 0,
    "last_reported_at": None,
    "report_hold_at": None,
}
# The instruction flags and their approval, and what a memory without a row has.
MEMORY_REVIEW_DEFAULTS = {
    "instruction_flags": [],
    "flagged": False,
    "approved_at": None,
    "approved_by": None,
}
# Every value of a memory's `MemoryState` (a test's factory passes these to the row).
MEMORY_STATE_FIELDS = (*MEMORY_USAGE_DEFAULTS, *MEMORY_REVIEW_DEFAULTS)


def memory_usage() -> dict:
    """ORM annotations of a memory's `MemoryState` values under their own names (a LEFT
    JOIN; a memory without a row reads the defaults): `.annotate(**memory_usage())` lets a
    page read `memory.cite_count` as before, in the memories' own statement."""
    annotations = {}
    for name, default in MEMORY_USAGE_DEFAULTS.items():
        path = F(f"auto_memory_state__{name}")
        annotations[name] = Coalesce(path, Value(default)) if default is not None else path
    return annotations


def memory_review() -> dict:
    """ORM annotations of a memory's instruction flags and approval (`MemoryState`, the
    same LEFT JOIN as `memory_usage`): `flagged`, `instruction_flags` (None without a row),
    `approved_at`, `approved_by_name` and `awaiting_approval`, so that a page reads them
    in the memories' own statement."""
    flagged = Coalesce(F("auto_memory_state__flagged"), Value(False))
    return {
        "flagged": flagged,
        "instruction_flags": F("auto_memory_state__instruction_flags"),
        "approved_at": F("auto_memory_state__approved_at"),
        "approved_by_name": F("auto_memory_state__approved_by__username"),
        "awaiting_approval": ExpressionWrapper(
            Q(auto_memory_state__flagged=True, auto_memory_state__approved_at__isnull=True),
            output_field=models.BooleanField(),
        ),
    }


class MemorySourceTask(models.Model):
    """A task whose knowledge went into a memory (provenance: memory -> tasks).

    Unique per task: a task goes into at most one memory, whether it made a new one or was
    merged into an existing one by consolidation. Auto memory's own table: the host's memory
    keeps its first source task only (`IdentityMemory.source_task`).
    """

    memory = models.ForeignKey(
        IdentityMemory, on_delete=models.CASCADE, related_name="source_links"
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="memory_links")
    # How the task got in: it made the memory, or it was merged into it.
    merged = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "automemory_memory_source_tasks"
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["task"], name="memory_source_one_memory_per_task"),
        ]
        indexes = [models.Index(fields=["memory", "created_at"], name="memory_source_memory_idx")]

    def __str__(self) -> str:
        return f"task {self.task_id} -> memory {self.memory_id}"
