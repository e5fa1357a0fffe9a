"""The host control plane: projects, memberships, tasks, messages, quotas, memories, audit."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles that hold the `create_task` permission (queue, continue, message, manage memories).
CREATE_TASK_ROLES = frozenset({Role.OWNER, Role.MEMBER})


class Project(models.Model):
    name = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="created_projects"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user"),
            models.CheckConstraint(
                condition=Q(role__in=[r.value for r in Role]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class TaskStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    INTERRUPTED = "interrupted", "Interrupted"
    MERGED = "merged", "Merged"


TERMINAL_STATUSES = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.INTERRUPTED, TaskStatus.MERGED}
)


class TaskKind(models.TextChoices):
    STANDARD = "standard", "Standard"
    COORDINATOR = "coordinator", "Coordinator"


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
    # The SHA-256 of the running turn's memory tool key (controlplane.services.task_keys),
    # set by the claim, cleared when the turn ends: the key works only while it runs.
    memory_key_hash = models.CharField(max_length=64, blank=True, default="")
    # Memories whose text was prepended to the first turn's in-memory prompt.
    injected_memory_ids = models.JSONField(default=list, blank=True)
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
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in TaskStatus]), name="task_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in TaskKind]), name="task_kind_valid"
            ),
            # The memory tool finds a running task by its key's hash (only running tasks
            # have one, so the index stays as small as the running set).
            models.UniqueConstraint(
                fields=["memory_key_hash"],
                condition=~Q(memory_key_hash=""),
                name="task_memory_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.status})"

    @property
    def injected_ids(self) -> list[int]:
        """The memory ids of `injected_memory_ids`, in order, without repeats; anything that
        is not a positive integer (a list written by hand, an odd import) is ignored."""
        values = self.injected_memory_ids if isinstance(self.injected_memory_ids, list) else []
        ids = (v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0)
        return list(dict.fromkeys(ids))

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


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


class Quota(models.Model):
    """A monthly USD limit. No row: the default limit; a NULL `monthly_limit_usd`: unlimited."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quota"
    )
    monthly_limit_usd = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "quotas"
        constraints = [
            models.CheckConstraint(
                condition=Q(monthly_limit_usd__isnull=True) | Q(monthly_limit_usd__gte=0),
                name="quota_limit_non_negative",
            )
        ]

    def __str__(self) -> str:
        return f"quota of {self.user}"


class UsageKind(models.TextChoices):
    """What a ledger row paid for. A new kind is added here with a migration of the
    `usage_kind_valid` check; every kind counts towards the user's monthly spend."""

    TASK_RUN = "task_run", "Task run"
    # Auto memory's model calls, charged to the task's user (no turn, no thread).
    MEMORY_EXTRACTION = "memory_extraction", "Memory extraction (model call)"
    MEMORY_CONSOLIDATION = "memory_consolidation", "Memory consolidation (model call)"


# The token counts of a ledger row (the same names as the executors' `TokenUsage`).
USAGE_TOKEN_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


class UsageRecord(models.Model):
    """One entry of the usage ledger: what one run (turn) of a task, or one later model call,
    used and cost, and when it finished. Append-only: rows are written by `usage_record` and
    never changed; a month's spend is the sum of the rows that finished in it (UTC).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="usage_records",
        db_index=False,  # usage_user_finished_idx leads with the user
    )
    # SET_NULL: the spend of a deleted task still counts.
    task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="usage_records",
        db_index=False,  # usage_task_idx leads with the task
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="usage_records"
    )
    kind = models.CharField(max_length=32, choices=UsageKind.choices, default=UsageKind.TASK_RUN)
    turn = models.PositiveIntegerField(null=True, blank=True)
    thread_id = models.CharField(max_length=200, blank=True, default="")
    executor = models.CharField(max_length=32, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    # Cached and cache-write tokens are parts of the input; reasoning tokens part of the output.
    input_tokens = models.PositiveBigIntegerField(default=0)
    cached_input_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
    )
    finished_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "usage_ledger"
        ordering = ["id"]
        indexes = [
            # A task's runs (the runs endpoint, the admin, the thread's earlier usage).
            models.Index(fields=["task", "id"], name="usage_task_idx"),
            # A user's spend in a month, recomputed by the honesty check: an index-only sum.
            models.Index(
                fields=["user", "finished_at", "cost_usd"], name="usage_user_finished_idx"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in UsageKind]), name="usage_kind_valid"
            ),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="usage_cost_non_negative"),
            models.CheckConstraint(
                condition=Q(turn__isnull=True) | Q(turn__gte=1), name="usage_turn_positive"
            ),
            models.CheckConstraint(
                condition=Q(input_tokens__gte=0)
                & Q(cached_input_tokens__gte=0)
                & Q(cache_write_input_tokens__gte=0)
                & Q(output_tokens__gte=0)
                & Q(reasoning_output_tokens__gte=0),
                name="usage_tokens_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of task {self.task_id} turn {self.turn}: ${self.cost_usd}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise PermissionError("Usage records are append-only.")
        super().save(*args, **kwargs)


class MonthlySpend(models.Model):
    """A user's spend in one UTC calendar month: the sum (and count) of their ledger rows that
    finished in it. `usage_record` adds to it in the transaction that writes each row, so the
    quota reads one row whatever the history; `monthly_spend_verify` checks it against the ledger.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="monthly_spends",
        db_index=False,  # the unique (user, month) constraint leads with the user
    )
    # The first day of the month.
    month = models.DateField()
    total_usd = models.DecimalField(max_digits=20, decimal_places=6, default=Decimal("0"))
    entries = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "usage_monthly_spend"
        ordering = ["-month", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "month"], name="monthly_spend_user_month"),
            models.CheckConstraint(
                condition=Q(total_usd__gte=0), name="monthly_spend_total_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(entries__gte=0), name="monthly_spend_entries_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"spend of {self.user} in {self.month:%Y-%m}: ${self.total_usd}"


class MemoryScope(models.TextChoices):
    USER = "user", "User"
    PROJECT = "project", "Project"


class MemorySource(models.TextChoices):
    MANUAL = "manual", "Manual"
    AUTO = "auto", "Auto"


class MemoryVisibility(models.TextChoices):
    # Every member of the project sees it (the default for every memory).
    PROJECT = "project", "The project"
    # Only its author (`created_by`) sees it, gets it injected or finds it, until they share
    # it: an auto memory drawn from a task that received its user's private memories.
    AUTHOR = "author", "Its author only"


class MemoryStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUPERSEDED = "superseded", "Superseded"
    # Retired by the retention rule (unused for too long); visible and restorable.
    ARCHIVED = "archived", "Archived"


def memory_last_used():
    """When a memory was last used: cited by a task, or written (created, edited, merged
    into, restored). Being injected is not use: a memory put in front of many tasks that no
    task cites ages like one never injected. The age the retention rule reads; its index
    (`memory_auto_retention_idx`) needs the query to use this very expression."""
    return Greatest(F("updated_at"), Coalesce(F("last_cited_at"), F("updated_at")))


class IdentityMemory(models.Model):
    """A remembered fact about a user (scope user) or a project (scope project).

    User-level memories are written only by hand. Auto memories are project-level, come from
    one task each (`source_task`, exposed as `source_thread_id`) and carry `goal_key`, the
    hash of their normalised goal line, so that one goal keeps one active memory.
    """

    scope = models.CharField(max_length=16, choices=MemoryScope.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="identity_memories",
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="memories"
    )
    content = models.TextField()
    source = models.CharField(
        max_length=16, choices=MemorySource.choices, default=MemorySource.MANUAL
    )
    source_task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="auto_memories",
        db_column="source_thread_id",
    )
    goal_key = models.CharField(max_length=64, blank=True, default="")
    # When the source task finished: the later finish wins when two tasks share a goal.
    source_finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=MemoryStatus.choices, default=MemoryStatus.ACTIVE
    )
    visibility = models.CharField(
        max_length=16, choices=MemoryVisibility.choices, default=MemoryVisibility.PROJECT
    )
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="created_memories",
    )
    # Search words a model gave with the memory (model-based extraction); may be empty.
    keywords = models.JSONField(default=list, blank=True)
    # Usage: how many tasks the memory was injected into, and when last; how many tasks cited
    # it as used (a `Memories used:` line, or the memory tool's cite), and when last; how
    # many reports said it misled (`wrong`, `outdated`, `unsafe`), and when last.
    injection_count = models.PositiveIntegerField(default=0)
    last_injected_at = models.DateTimeField(null=True, blank=True)
    cite_count = models.PositiveIntegerField(default=0)
    last_cited_at = models.DateTimeField(null=True, blank=True)
    report_count = models.PositiveIntegerField(default=0)
    last_reported_at = models.DateTimeField(null=True, blank=True)
    # Set by a report: the memory is held out of injection and search until a project owner
    # reviews it (approves it, edits it or deletes it).
    report_hold_at = models.DateTimeField(null=True, blank=True)
    # Content that reads like instructions to the agent ("ignore previous instructions",
    # role tags...). A flagged memory is injected only once a project owner approved it (an
    # owner's own text is approved by its author when written).
    instruction_flags = models.JSONField(default=list, blank=True)
    flagged = models.BooleanField(default=False)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_memories",
    )
    # When the retention rule archived the memory (status `archived`); cleared on restore.
    archived_at = models.DateTimeField(null=True, blank=True)
    # Every task whose knowledge is in this memory (the first is `source_task`; a
    # consolidation that merges a task into the memory adds it). A task feeds one memory.
    source_tasks = models.ManyToManyField(
        Task, through="MemorySourceTask", related_name="sourced_memories", blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "identity_memories"
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "identity memories"
        indexes = [
            # Injection: newest active memories of a user / of a project.
            models.Index(
                fields=["user", "-created_at", "-id"],
                name="memory_user_active_idx",
                condition=Q(scope="user", status="active"),
            ),
            models.Index(
                fields=["project", "-created_at", "-id"],
                name="memory_project_active_idx",
                condition=Q(scope="project", status="active"),
            ),
            # The console's list of a project's memories: every status, newest first.
            models.Index(
                fields=["project", "-created_at", "-id"], name="memory_project_created_idx"
            ),
            # Retention: a user's active auto memories (`created_by` is the source task's
            # user) by when they were last used, so a pass reads only the stale ones.
            models.Index(
                F("created_by"),
                memory_last_used(),
                name="memory_auto_retention_idx",
                condition=Q(source="auto", status="active"),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(scope="user", user__isnull=False, project__isnull=True)
                    | Q(scope="project", project__isnull=False)
                ),
                name="memory_scope_owner",
            ),
            # Auto extraction never writes user-level memories.
            models.CheckConstraint(
                condition=~Q(source="auto") | Q(scope="project", source_task__isnull=False),
                name="memory_auto_is_project_level",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in MemoryStatus]),
                name="memory_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="archived", archived_at__isnull=False)
                | (~Q(status="archived") & Q(archived_at__isnull=True)),
                name="memory_archived_has_time",
            ),
            models.CheckConstraint(
                condition=Q(approved_at__isnull=True) | Q(flagged=True),
                name="memory_approval_needs_flag",
            ),
            # One auto memory per source task.
            models.UniqueConstraint(
                fields=["source_task"],
                condition=Q(source="auto"),
                name="memory_one_auto_per_task",
            ),
            # At most one active auto memory per (project, goal) that the project sees, and
            # one per (project, goal, author) held for its author.
            models.UniqueConstraint(
                fields=["project", "goal_key"],
                condition=Q(source="auto", status="active", visibility="project"),
                name="memory_one_active_auto_per_goal",
            ),
            models.UniqueConstraint(
                fields=["project", "goal_key", "created_by"],
                condition=Q(source="auto", status="active", visibility="author"),
                name="memory_one_active_held_auto_per_goal",
            ),
            models.CheckConstraint(
                condition=Q(visibility__in=[v.value for v in MemoryVisibility]),
                name="memory_visibility_valid",
            ),
            # Only a project memory can be held for its author.
            models.CheckConstraint(
                condition=Q(visibility="project") | Q(scope="project"),
                name="memory_author_only_is_project_level",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} memory {self.pk}"

    @property
    def awaiting_approval(self) -> bool:
        """A flagged memory no owner has approved yet: it is not injected."""
        return self.flagged and self.approved_at is None

    @property
    def held_for_review(self) -> bool:
        """Held out of injection and search until a project owner reviews it: flagged and not
        approved, or reported."""
        return self.awaiting_approval or self.report_hold_at is not None


class MemorySourceTask(models.Model):
    """A task whose knowledge went into a memory (provenance: memory -> tasks).

    Unique per task: a task goes into at most one memory, whether it made a new one or was
    merged into an existing one by consolidation.
    """

    memory = models.ForeignKey(
        IdentityMemory, on_delete=models.CASCADE, related_name="source_links"
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="memory_links")
    # How the task got in: it made the memory, or it was merged into it.
    merged = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "identity_memory_source_tasks"
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["task"], name="memory_source_one_memory_per_task"),
        ]
        indexes = [models.Index(fields=["memory", "created_at"], name="memory_source_memory_idx")]

    def __str__(self) -> str:
        return f"task {self.task_id} -> memory {self.memory_id}"


class AuditEvent(models.Model):
    """An append-only record of something that happened (never updated or deleted by the app)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    # Who acted when it was not a user, e.g. "worker:host-1234".
    actor_label = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=50, blank=True, default="")
    target_id = models.CharField(max_length=64, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "audit_log"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
            models.Index(fields=["action", "created_at"], name="audit_action_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} on {self.target_type} {self.target_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise PermissionError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("Audit events are append-only.")


class ApiToken(models.Model):
    """An API token: only the SHA-256 of its key is stored; the key is shown once, at creation.

    A user may hold several, each named, optionally expiring, revocable (the row stays, with
    `revoked_at` set) and stamped with when it was last used (written at most once a minute).
    `prefix` is the key's first characters, enough to tell tokens apart, never enough to use.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="api_token_user_idx")]
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="api_token_name_not_blank"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
