"""Auto memory's own tables: per-user settings, per-task flags and the extraction log."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from controlplane.models import IdentityMemory, Task

MAX_IDLE_SECONDS = 30 * 24 * 3600
MAX_DURATION_SECONDS = 7 * 24 * 3600
MAX_RESULT_CHARS = 1_000_000
MAX_INTERNAL_MCP_SERVERS = 50
MCP_SERVER_NAME_MAX_CHARS = 100
# The block's fixed text (header, the citation request, the fence note and markers, the
# task heading) takes about 480 characters: the smallest budget still carries one memory of
# 100 characters (a test holds this).
MIN_INJECTION_MAX_CHARS = 600
MIN_INJECTION_MAX_CHARS_MESSAGE = (
    f"Ensure this value is greater than or equal to {MIN_INJECTION_MAX_CHARS}: the block's "
    "own text takes about 480 characters, and this leaves room for one short memory."
)
MAX_INJECTION_MAX_CHARS = 1_000_000
MAX_UNUSED_DAYS = 3650
MAX_MEMORY_BUDGET_USD = Decimal("100000")


def mcp_server_names_problems(value) -> list[str]:
    """Why `value` is not a list of MCP server names (distinct, non-empty, printable, short)."""
    if not isinstance(value, list):
        return ["Must be a JSON list of server names."]
    if len(value) > MAX_INTERNAL_MCP_SERVERS:
        return [f"Ensure this list has at most {MAX_INTERNAL_MCP_SERVERS} names."]
    problems, seen = [], set()
    for index, name in enumerate(value):
        if not isinstance(name, str):
            problems.append(f"Item {index}: must be a string.")
        elif not name.strip():
            problems.append(f"Item {index}: may not be blank.")
        elif name != name.strip():
            problems.append(f"Item {index}: may not start or end with white space.")
        elif len(name) > MCP_SERVER_NAME_MAX_CHARS:
            problems.append(f"Item {index}: at most {MCP_SERVER_NAME_MAX_CHARS} characters.")
        elif not name.isprintable():
            problems.append(f"Item {index}: may not contain control characters.")
        elif name in seen:
            problems.append(f"Item {index}: {name!r} is listed twice.")
        else:
            seen.add(name)
    return problems


def validate_mcp_server_names(value) -> None:
    problems = mcp_server_names_problems(value)
    if problems:
        raise ValidationError(problems)


class InjectionRanking(models.TextChoices):
    RECENT = "recent", "Newest first"
    RELEVANT = "relevant", "Most relevant to the task first (full-text search)"


class AutoMemorySettings(models.Model):
    """A user's auto memory switches and gates. A user without a row has the defaults."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="auto_memory_settings"
    )
    generate_memories = models.BooleanField(default=False)
    use_memories = models.BooleanField(default=False)
    disable_on_external_context = models.BooleanField(default=True)
    min_rate_limit_remaining_percent = models.PositiveSmallIntegerField(
        default=20, validators=[MinValueValidator(0), MaxValueValidator(100)]
    )
    idle_seconds = models.PositiveIntegerField(
        default=900, validators=[MinValueValidator(0), MaxValueValidator(MAX_IDLE_SECONDS)]
    )
    min_duration_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(0), MaxValueValidator(MAX_DURATION_SECONDS)]
    )
    min_result_chars = models.PositiveIntegerField(
        default=200, validators=[MinValueValidator(0), MaxValueValidator(MAX_RESULT_CHARS)]
    )
    extract_model = models.CharField(max_length=200, null=True, blank=True)
    consolidation_model = models.CharField(max_length=200, null=True, blank=True)
    # MCP servers whose tool calls count as internal (not external context); names as the
    # executor reports them in `mcp_tool_call` events.
    internal_mcp_servers = models.JSONField(
        default=list, blank=True, validators=[validate_mcp_server_names]
    )
    # Which memories the first turn gets, and the most characters the whole block may take.
    injection_ranking = models.CharField(
        max_length=16, choices=InjectionRanking.choices, default=InjectionRanking.RECENT
    )
    injection_max_chars = models.PositiveIntegerField(
        default=10_000,
        validators=[
            MinValueValidator(MIN_INJECTION_MAX_CHARS, message=MIN_INJECTION_MAX_CHARS_MESSAGE),
            MaxValueValidator(MAX_INJECTION_MAX_CHARS),
        ],
    )
    # Retention: archive auto memories not used (cited, edited or restored) in this many days
    # (0: off).
    max_unused_days = models.PositiveIntegerField(
        default=0, validators=[MinValueValidator(0), MaxValueValidator(MAX_UNUSED_DAYS)]
    )
    # The most auto memory's model calls may cost this user in a UTC calendar month.
    monthly_memory_budget_usd = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(MAX_MEMORY_BUDGET_USD)],
    )
    # When the extraction model is unavailable, write the deterministic memory instead of
    # waiting for the model (off: the task waits and is retried).
    fallback_to_deterministic = models.BooleanField(default=False)
    # Privacy by consent: an auto memory drawn from a task that received the user's private
    # (user-level) memories, in a project with other members, is held for the user until
    # they share it; on, it is the project's at once.
    share_private_derived = models.BooleanField(default=False)
    # Off: the user's own memories go only into tasks of projects where they are the only
    # member (an agent's answer can paraphrase what it was given, and members read it).
    personal_memories_in_shared_projects = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "auto memory settings"
        verbose_name_plural = "auto memory settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(min_rate_limit_remaining_percent__gte=0)
                & Q(min_rate_limit_remaining_percent__lte=100),
                name="automemory_settings_percent_range",
            ),
            models.CheckConstraint(
                condition=Q(idle_seconds__gte=0) & Q(idle_seconds__lte=MAX_IDLE_SECONDS),
                name="automemory_settings_idle_range",
            ),
            models.CheckConstraint(
                condition=Q(min_duration_seconds__gte=0)
                & Q(min_duration_seconds__lte=MAX_DURATION_SECONDS),
                name="automemory_settings_duration_range",
            ),
            models.CheckConstraint(
                condition=Q(min_result_chars__gte=0) & Q(min_result_chars__lte=MAX_RESULT_CHARS),
                name="automemory_settings_chars_range",
            ),
            models.CheckConstraint(
                condition=Q(injection_ranking__in=[r.value for r in InjectionRanking]),
                name="automemory_settings_ranking_valid",
            ),
            models.CheckConstraint(
                condition=Q(injection_max_chars__gte=MIN_INJECTION_MAX_CHARS)
                & Q(injection_max_chars__lte=MAX_INJECTION_MAX_CHARS),
                name="automemory_settings_injection_chars_range",
            ),
            models.CheckConstraint(
                condition=Q(max_unused_days__gte=0) & Q(max_unused_days__lte=MAX_UNUSED_DAYS),
                name="automemory_settings_unused_days_range",
            ),
            models.CheckConstraint(
                condition=Q(monthly_memory_budget_usd__gte=0)
                & Q(monthly_memory_budget_usd__lte=MAX_MEMORY_BUDGET_USD),
                name="automemory_settings_memory_budget_range",
            ),
        ]

    def __str__(self) -> str:
        return f"auto memory settings of {self.user}"


class TaskAutoMemoryFlags(models.Model):
    """Per-task overrides; NULL follows the user's setting. Kept apart from the tasks table."""

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_flags"
    )
    use_memories = models.BooleanField(null=True, blank=True)
    generate_memories = models.BooleanField(null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "task auto memory flags"
        verbose_name_plural = "task auto memory flags"

    def __str__(self) -> str:
        return f"auto memory flags of task {self.task_id}"


# Skips that may clear by themselves (time passes, quota frees up): retried every round.
TRANSIENT_REASONS = (
    "not_idle",
    "quota_low",
    "quota_check_failed",
    "model_unavailable",
    "memory_budget_exhausted",
)
# Skips that hold until the task, the user's settings or the task's flags change.
STABLE_REASONS = (
    "generate_disabled",
    "missing_timestamps",
    "duration_too_short",
    "result_too_short",
    "external_context",
    "private_content",
    "no_durable_signal",
    "already_known",
)
# An extraction that failed unexpectedly is retried this many times at most.
MAX_ERROR_ATTEMPTS = 5
# The retry set: what the sweep looks at again without the task changing.
RETRY_CONDITION = (
    Q(outcome="error") | Q(outcome="skipped", reason__in=TRANSIENT_REASONS) | Q(recheck=True)
)
SKIPPED_CONDITION = Q(outcome="skipped")


class Outcome(models.TextChoices):
    EXTRACTED = "extracted", "Extracted"
    SKIPPED = "skipped", "Skipped"
    ERROR = "error", "Error"


class Reason(models.TextChoices):
    GENERATE_DISABLED = "generate_disabled", "Generate switch off"
    NOT_IDLE = "not_idle", "Not idle long enough"
    MISSING_TIMESTAMPS = "missing_timestamps", "Missing started_at or finished_at"
    DURATION_TOO_SHORT = "duration_too_short", "Run too short"
    RESULT_TOO_SHORT = "result_too_short", "Result too short"
    EXTERNAL_CONTEXT = "external_context", "Saw external context"
    PRIVATE_CONTENT = "private_content", "Would hold a user-level memory's text"
    QUOTA_LOW = "quota_low", "Monthly quota low"
    QUOTA_CHECK_FAILED = "quota_check_failed", "Quota could not be read"
    NO_DURABLE_SIGNAL = "no_durable_signal", "Nothing durable to remember (model's judgement)"
    ALREADY_KNOWN = "already_known", "Already known (consolidation found it remembered)"
    MODEL_UNAVAILABLE = "model_unavailable", "Memory model unavailable (retried later)"
    MEMORY_BUDGET_EXHAUSTED = (
        "memory_budget_exhausted",
        "Monthly memory budget used up (retried next month)",
    )
    NEW = "new", "New memory"
    SUPERSEDED = "superseded", "Superseded an older memory"
    # Written, but at once superseded by the active memory of a task that finished later.
    SUPERSEDED_ON_WRITE = "superseded_on_write", "Written, superseded by a later task's memory"
    MERGED = "merged", "Merged into an existing memory"
    # Written, held for its author: the task received their private memories and the project
    # has other members (shared when the author says so).
    HELD_FOR_AUTHOR = "held_for_author", "Written, held for its author until shared"
    MODEL_OUTPUT_INVALID = "model_output_invalid", "Model's answer did not match the schema"
    ERROR = "error", "Unexpected error"


class AutoMemoryLog(models.Model):
    """The latest extraction attempt for one task: one row per task, overwritten each time."""

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_log"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="auto_memory_logs"
    )
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.CharField(max_length=32, choices=Reason.choices)
    memory = models.ForeignKey(
        IdentityMemory, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    forced = models.BooleanField(default=False)
    # Set when the user's settings or the task's flags changed after a stable skip: the
    # next sweep looks at the task again.
    recheck = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=1)
    # The worker's sweep leaves a transient skip or an error alone until then (a not-idle
    # task until it is idle, a low quota for a while, errors with a growing back-off).
    retry_after = models.DateTimeField(null=True, blank=True)
    # Redacted detail (an error's message, the numbers behind a skip).
    detail = models.TextField(blank=True, default="")
    first_attempt_at = models.DateTimeField()
    last_attempt_at = models.DateTimeField()
    # Set when the task's memory was withdrawn because the task saw external context after it
    # was written: the task is never extracted again.
    retracted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_attempt_at", "-task_id"]
        indexes = [
            models.Index(fields=["user", "-last_attempt_at"], name="amlog_user_recent_idx"),
            # The sweep's retry set: transient skips and errors, whatever the history size.
            models.Index(
                fields=["last_attempt_at"], name="amlog_retry_idx", condition=RETRY_CONDITION
            ),
            # The per-user sweep: one user's retry set, and (forced) one user's skips.
            models.Index(
                fields=["user", "last_attempt_at"],
                name="amlog_user_retry_idx",
                condition=RETRY_CONDITION,
            ),
            models.Index(
                fields=["user", "last_attempt_at"],
                name="amlog_user_skipped_idx",
                condition=SKIPPED_CONDITION,
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=[o.value for o in Outcome]), name="amlog_outcome_valid"
            ),
            models.CheckConstraint(
                condition=Q(reason__in=[r.value for r in Reason]), name="amlog_reason_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id}: {self.outcome} ({self.reason})"


class SweepState(models.Model):
    """A sweep's cursor and its lease: `global` (every user's tasks) or `user:<id>` (one user's).

    `cursor_*` is the (updated_at, id) of the last completed task the sweep examined, so each
    sweep reads only what changed since; `last_sweep_at` tells operators when it last ran.

    The lease makes one sweeper at a time: a holder's random `lease_token` and its
    `lease_expires_at`, renewed while it works and taken over once expired (its holder died).
    `lease_generation` counts the holders that took it. The cursor moves only under the lease
    (the update is conditional on the token), so a sweeper that lost it cannot move it.
    """

    name = models.CharField(max_length=32, primary_key=True)
    cursor_updated_at = models.DateTimeField(null=True, blank=True)
    cursor_task_id = models.BigIntegerField(default=0)
    last_sweep_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_holder = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_generation = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "sweep state"
        constraints = [
            models.CheckConstraint(
                condition=Q(lease_token__isnull=True, lease_expires_at__isnull=True)
                | Q(lease_token__isnull=False, lease_expires_at__isnull=False),
                name="sweepstate_lease_whole",
            ),
        ]

    def __str__(self) -> str:
        return f"sweep state {self.name}"


class ExtractionDraft(models.Model):
    """A paid extraction not yet written: what the extraction model answered for one task.

    Written in the transaction that records the model call in the usage ledger, and deleted
    in the one that writes the task's memory and log row. A sweep that died in between, or
    whose consolidation step failed, leaves it: the next sweep uses it instead of paying for
    the extraction again, while the task and the extraction model are unchanged. `content`
    is the cleaned, redacted memory text; empty with a `declined_reason` when the model found
    nothing worth remembering.
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_draft"
    )
    extract_model = models.CharField(max_length=200)
    task_updated_at = models.DateTimeField()
    content = models.TextField(blank=True, default="")
    keywords = models.JSONField(default=list, blank=True)
    declined_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "extraction draft"

    def __str__(self) -> str:
        return f"paid extraction of task {self.task_id}"


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
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in FeedbackKind]), name="feedback_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind="cite", reason="")
                | Q(kind="report", reason__in=[r.value for r in ReportReason]),
                name="feedback_reason_fits_kind",
            ),
            models.CheckConstraint(
                condition=Q(via__in=[v.value for v in FeedbackVia]), name="feedback_via_valid"
            ),
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
