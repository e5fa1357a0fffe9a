"""Per-user auto memory settings and the limits their fields are checked against."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from controlplane.models import choices_check

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


def _in_range(field: str, low, high, name: str) -> models.CheckConstraint:
    """The database's check that `field` lies between `low` and `high` (both included)."""
    return models.CheckConstraint(
        condition=Q(**{f"{field}__gte": low}) & Q(**{f"{field}__lte": high}), name=name
    )


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
            _in_range(
                "min_rate_limit_remaining_percent", 0, 100, "automemory_settings_percent_range"
            ),
            _in_range("idle_seconds", 0, MAX_IDLE_SECONDS, "automemory_settings_idle_range"),
            _in_range(
                "min_duration_seconds",
                0,
                MAX_DURATION_SECONDS,
                "automemory_settings_duration_range",
            ),
            _in_range("min_result_chars", 0, MAX_RESULT_CHARS, "automemory_settings_chars_range"),
            choices_check(
                "injection_ranking", InjectionRanking, "automemory_settings_ranking_valid"
            ),
            _in_range(
                "injection_max_chars",
                MIN_INJECTION_MAX_CHARS,
                MAX_INJECTION_MAX_CHARS,
                "automemory_settings_injection_chars_range",
            ),
            _in_range(
                "max_unused_days", 0, MAX_UNUSED_DAYS, "automemory_settings_unused_days_range"
            ),
            _in_range(
                "monthly_memory_budget_usd",
                0,
                MAX_MEMORY_BUDGET_USD,
                "automemory_settings_memory_budget_range",
            ),
        ]

    def __str__(self) -> str:
        return f"auto memory settings of {self.user}"
