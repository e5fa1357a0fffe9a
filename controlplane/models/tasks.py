"""Tasks, the messages between them and the events their runs recorded."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from controlplane.models.constraints import choices_check
from controlplane.models.projects import Project


class TaskStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    INTERRUPTED = "interrupted", "Interrupted"
    MERGED = "merged", "Merged"


# A task's title (the first line of its goal or prompt) is cut to this many characters.
TITLE_CHARS = 200

TERMINAL_STATUSES = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.INTERRUPTED, TaskStatus.MERGED}
)


class TaskKind(models.TextChoices):
    STANDARD = "standard", "Standard"
    COORDINATOR = "coordinator", "Coordinator"


def task_title(text: str) -> str:
    """A task's title from its goal (or prompt), or from the head of it: the first line, at
    most `TITLE_CHARS` characters ("" for a blank text)."""
    text = text.strip()
    return text.splitlines()[0][:TITLE_CHARS] if text else ""


class Task(models.Model):
    """A coding-agent task. `prompt` and `goal` are stored as the user sent them, never edited."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tasks"
    )
    prompt = models.TextField()
    goal = models.TextField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=TaskKind.choices, default=TaskKind.STANDARD)
    parent_task = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="subtasks"
    )
    status = models.CharField(
        max_length=16, choices=TaskStatus.choices, default=TaskStatus.QUEUED, db_index=False
    )
    turn = models.PositiveIntegerField(default=1)
    # The prompt of the latest continuation (turn > 1); the executor runs it for that turn.
    continuation_prompt = models.TextField(blank=True, default="")
    # True while the queued turn is a checkpoint resume of a turn whose worker went away.
    is_resume = models.BooleanField(default=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result_text = models.TextField(blank=True, default="")
    # Why the last turn failed (quota refused, executor error, ...); empty when it did not.
    failure_reason = models.TextField(blank=True, default="")
    # The sum of the costs of its runs in the usage ledger, kept in the transaction that
    # records each run (`usage_record`), so task lists show it without an aggregate.
    cost_usd = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
    )
    executor = models.CharField(max_length=32, blank=True, default="")
    thread_id = models.CharField(max_length=200, blank=True, default="")
    worker_id = models.CharField(max_length=200, blank=True, default="")
    # When `worker_id` claimed the running turn: the start of its run, and with `worker_id`
    # the fence every later write of that worker checks (a task taken over is not written).
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The project's repository: the branch the task works on (set at creation; "" for a
    # project without a repository), the commit its first turn started from (resolved by the
    # worker at claim), and, after each turn that changed something, the head of its own
    # branch `controlplane/task-<id>` and the paths changed against `base_commit`.
    branch = models.CharField(max_length=255, blank=True, default="")
    base_commit = models.CharField(max_length=64, blank=True, default="")
    head_commit = models.CharField(max_length=64, blank=True, default="")
    changed_files = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the current turn was queued; the worker claims the oldest first.
    queued_at = models.DateTimeField(null=True, blank=True, default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The worker claims the oldest queued task.
            models.Index(
                fields=["queued_at", "id"],
                name="task_queue_idx",
                condition=Q(status="queued"),
            ),
            # Recovery looks for running tasks with a stale heartbeat.
            models.Index(
                fields=["heartbeat_at"], name="task_running_hb_idx", condition=Q(status="running")
            ),
            # The memory sweep reads the completed tasks that changed since its last round,
            # in (updated_at, id) order.
            models.Index(
                fields=["updated_at", "id"],
                name="task_completed_updated_idx",
                condition=Q(status="completed"),
            ),
            # The per-user memory sweep reads one user's completed tasks changed since a point.
            models.Index(
                fields=["user", "updated_at", "id"],
                name="task_user_completed_upd_idx",
                condition=Q(status="completed"),
            ),
            models.Index(fields=["project", "id"], name="task_project_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(turn__gte=1), name="task_turn_positive"),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="task_cost_non_negative"),
            choices_check("status", TaskStatus, "task_status_valid"),
            choices_check("kind", TaskKind, "task_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def title(self) -> str:
        """The first line of the goal (or, without one, the prompt), at most 200 characters.
        A list's rows carry the head of that text as `title_source` and leave the texts
        unread (`selectors.task_list`)."""
        text = getattr(self, "title_source", None)
        return task_title((self.goal or self.prompt or "") if text is None else text)


class TaskFollowup(models.Model):
    """An inter-task message delivered to `task`; a task that received one had external context."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="followups")
    from_task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="sent_followups"
    )
    message = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "task_followups"
        ordering = ["id"]
        indexes = [models.Index(fields=["task"], name="followup_task_idx")]

    def __str__(self) -> str:
        return f"message to task {self.task_id}"


class TaskEvent(models.Model):
    """Something an executor reported during a turn (an MCP tool call, a web search, ...)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    turn = models.PositiveIntegerField()
    kind = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["task", "kind"], name="taskevent_task_kind_idx")]

    def __str__(self) -> str:
        return f"{self.kind} on task {self.task_id}"
