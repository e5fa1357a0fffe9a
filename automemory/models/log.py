"""The extraction log: one row per task the sweep looked at, and the reasons it records."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models import IdentityMemory, Task, choices_check

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
            choices_check("outcome", Outcome, "amlog_outcome_valid"),
            choices_check("reason", Reason, "amlog_reason_valid"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id}: {self.outcome} ({self.reason})"
