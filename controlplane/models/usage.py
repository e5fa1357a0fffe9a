"""Quotas, the usage ledger and the monthly spend it adds up to."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from controlplane.models.constraints import choices_check
from controlplane.models.projects import Project
from controlplane.models.tasks import Task


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
            choices_check("kind", UsageKind, "usage_kind_valid"),
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
