"""What tasks and people said of memories, and which memories a task was shown."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models import IdentityMemory, Task, choices_check


class FeedbackKind(models.TextChoices):
    CITE = "cite", "Cited (used)"
    REPORT = "report", "Reported (misled)"


class ReportReason(models.TextChoices):
    WRONG = "wrong", "Wrong"
    OUTDATED = "outdated", "Outdated"
    UNSAFE = "unsafe", "Unsafe"


class FeedbackVia(models.TextChoices):
    MCP = "mcp", "The memory tool (MCP)"
    RESULT_LINE = "result_line", "A `Memories used:` line in the result"
    PERSON = "person", "A person (API or console)"


# A person's report that still holds its memory: one per person and memory at a time.
OPEN_PERSON_REPORT = Q(kind="report", task__isnull=True, closed_at__isnull=True)


class MemoryFeedback(models.Model):
    """What a task (or a person) said of a memory: it was used (`cite`) or it misled
    (`report`, with a reason). One row per (memory, task, kind), so a task counts once
    however often it says so. A person's report has no task; a person has one open report
    of a memory at a time (closed when a project owner approves the memory)."""

    memory = models.ForeignKey(IdentityMemory, on_delete=models.CASCADE, related_name="feedback")
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.CASCADE, related_name="memory_feedback"
    )
    # Whose feedback: the task's user, or the person who reported.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=8, choices=FeedbackKind.choices)
    reason = models.CharField(max_length=16, choices=ReportReason.choices, blank=True, default="")
    # Redacted, at most FEEDBACK_NOTE_MAX_CHARS.
    note = models.TextField(blank=True, default="")
    via = models.CharField(max_length=16, choices=FeedbackVia.choices)
    # A report: when a project owner's approval released the memory it held (null: open).
    closed_at = models.DateTimeField(null=True, blank=True)
    # A person's report of a memory an owner approved after their earlier report of it.
    repeat = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "memory feedback"
        verbose_name_plural = "memory feedback"
        indexes = [
            models.Index(fields=["memory", "kind", "-created_at"], name="feedback_memory_idx"),
            # A memory's feedback list, newest first, of every kind.
            models.Index(
                fields=["memory", "-created_at", "-id"], name="feedback_memory_recent_idx"
            ),
            # The console's health page: a project's feedback over the last weeks.
            models.Index(fields=["created_at"], name="feedback_created_idx"),
            models.Index(fields=["task", "kind"], name="feedback_task_idx"),
            # A person's reports over the last hour (their limit per project).
            models.Index(
                fields=["user", "created_at"],
                name="feedback_person_report_idx",
                condition=Q(kind="report", task__isnull=True),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "task", "kind"],
                condition=Q(task__isnull=False),
                name="feedback_once_per_task",
            ),
            models.UniqueConstraint(
                fields=["memory", "user"],
                condition=OPEN_PERSON_REPORT,
                name="feedback_one_open_report_per_person",
            ),
            models.CheckConstraint(
                condition=Q(closed_at__isnull=True) | Q(kind="report"),
                name="feedback_only_reports_close",
            ),
            models.CheckConstraint(
                condition=Q(repeat=False) | Q(kind="report", task__isnull=True),
                name="feedback_repeats_are_person_reports",
            ),
            choices_check("kind", FeedbackKind, "feedback_kind_valid"),
            models.CheckConstraint(
                condition=Q(kind="cite", reason="")
                | Q(kind="report", reason__in=[r.value for r in ReportReason]),
                name="feedback_reason_fits_kind",
            ),
            choices_check("via", FeedbackVia, "feedback_via_valid"),
            models.CheckConstraint(
                condition=Q(task__isnull=False) | Q(via="person"),
                name="feedback_agents_have_a_task",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of memory {self.memory_id} by task {self.task_id}"


class TaskMemoryShown(models.Model):
    """A memory the memory tool showed to a running task (`memory_search`, `memory_get`):
    with the injected ones, the only memories the task may cite."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="memories_shown")
    memory = models.ForeignKey(IdentityMemory, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "memory shown to a task"
        constraints = [
            models.UniqueConstraint(fields=["task", "memory"], name="memory_shown_once_per_task")
        ]

    def __str__(self) -> str:
        return f"memory {self.memory_id} shown to task {self.task_id}"
