"""Input and output shapes of the auto memory endpoints.

Input is strict: booleans are JSON booleans (0 and 1 accepted), integers are JSON integers
(not strings, not booleans), and unknown fields are refused, so a typo is a 400 rather than
a silently ignored setting.
"""

from django.db.models import F
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from automemory.models import (
    AutoMemoryLog,
    FeedbackKind,
    FeedbackVia,
    InjectionRanking,
    MemoryFeedback,
    Outcome,
    Reason,
    ReportReason,
    mcp_server_names_problems,
)
from automemory.models.settings import (
    MAX_DURATION_SECONDS,
    MAX_IDLE_SECONDS,
    MAX_INJECTION_MAX_CHARS,
    MAX_INTERNAL_MCP_SERVERS,
    MAX_MEMORY_BUDGET_USD,
    MAX_RESULT_CHARS,
    MAX_UNUSED_DAYS,
    MCP_SERVER_NAME_MAX_CHARS,
    MIN_INJECTION_MAX_CHARS,
    MIN_INJECTION_MAX_CHARS_MESSAGE,
)
from controlplane.api.common import RejectUnknownFieldsMixin
from controlplane.api.row_output import ObjectValue, OutputField, RowOutput, column
from controlplane.api.serializers import BranchField, StrictTextField
from controlplane.limits import text_problem


@extend_schema_field({"oneOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}]})
class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be a JSON boolean (true or false; 0 or 1)."}

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        if type(data) is int and data in (0, 1):
            return bool(data)
        self.fail("invalid")


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "Must be a JSON integer."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class StrictDecimalField(serializers.DecimalField):
    """A JSON number or a decimal string ("1.50"); booleans are refused."""

    default_error_messages = {"invalid": "Must be a number (e.g. 1.5) or a decimal string."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            self.fail("invalid")
        return super().to_internal_value(data)


class ModelNameField(serializers.CharField):
    def __init__(self, **kwargs):
        super().__init__(
            max_length=200, allow_null=True, allow_blank=True, required=False, **kwargs
        )

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be a string or null.")
        problem = text_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        value = super().to_internal_value(data)
        return value or None


class ServerNamesField(serializers.ListField):
    """A JSON list of distinct MCP server names; each problem is reported with its item."""

    def __init__(self, **kwargs):
        super().__init__(
            child=serializers.CharField(max_length=MCP_SERVER_NAME_MAX_CHARS),
            max_length=MAX_INTERNAL_MCP_SERVERS,
            required=False,
            **kwargs,
        )

    def to_internal_value(self, data):
        # The model's own validator, so the API and the admin accept the same lists.
        problems = mcp_server_names_problems(data)
        if problems:
            raise serializers.ValidationError(problems)
        return list(data)


class AutoMemorySettingsSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    generate_memories = StrictBooleanField(required=False)
    use_memories = StrictBooleanField(required=False)
    disable_on_external_context = StrictBooleanField(required=False)
    min_rate_limit_remaining_percent = StrictIntegerField(
        required=False, min_value=0, max_value=100
    )
    idle_seconds = StrictIntegerField(required=False, min_value=0, max_value=MAX_IDLE_SECONDS)
    min_duration_seconds = StrictIntegerField(
        required=False, min_value=0, max_value=MAX_DURATION_SECONDS
    )
    min_result_chars = StrictIntegerField(required=False, min_value=0, max_value=MAX_RESULT_CHARS)
    extract_model = ModelNameField()
    consolidation_model = ModelNameField()
    internal_mcp_servers = ServerNamesField(
        help_text="MCP servers whose tool calls count as internal, not external context "
        f"(names as the agent reports them; at most {MAX_INTERNAL_MCP_SERVERS}, each at most "
        f"{MCP_SERVER_NAME_MAX_CHARS} characters)."
    )
    injection_ranking = serializers.ChoiceField(
        choices=InjectionRanking.choices,
        required=False,
        help_text="Which memories the first turn gets: `recent` (newest first) or `relevant` "
        "(best full-text match with the task's goal and prompt; recent ones fill free slots).",
    )
    injection_max_chars = StrictIntegerField(
        required=False,
        min_value=MIN_INJECTION_MAX_CHARS,
        max_value=MAX_INJECTION_MAX_CHARS,
        error_messages={"min_value": MIN_INJECTION_MAX_CHARS_MESSAGE},
        help_text="The most characters the whole injected block may take (header, delimiters "
        "and memories); memories that do not fit whole are left out.",
    )
    max_unused_days = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_UNUSED_DAYS,
        help_text="Archive auto memories not cited, edited or restored in this many days "
        "(0: never). Archived memories stay visible and can be restored.",
    )
    monthly_memory_budget_usd = StrictDecimalField(
        required=False,
        max_digits=12,
        decimal_places=2,
        min_value=0,
        max_value=MAX_MEMORY_BUDGET_USD,
        help_text="The most auto memory's model calls may cost you in a calendar month (UTC); "
        "once reached, extraction waits for the next month.",
    )
    fallback_to_deterministic = StrictBooleanField(
        required=False,
        help_text="When the extraction model is unavailable, write the deterministic memory "
        "instead of waiting for the model.",
    )
    share_private_derived = StrictBooleanField(
        required=False,
        help_text="A memory drawn from a task that received your own memories, in a project "
        "with other members, is held for you until you share it (POST /memories/{id}/share); "
        "on: it is the project's at once, and what the agent made of your notes goes with it.",
    )
    personal_memories_in_shared_projects = StrictBooleanField(
        required=False,
        help_text="Your own memories go into your tasks of shared projects too; off: only "
        "into projects where you are the only member, since an agent's answer (which members "
        "read) can reword what it was given.",
    )
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)


class TaskFlagsInputSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    use_memories = StrictBooleanField(required=False, allow_null=True)
    generate_memories = StrictBooleanField(required=False, allow_null=True)

    # Read-only fields of the output, tolerated when a client sends a GET body back.
    task_id = serializers.IntegerField(read_only=True)
    effective_use_memories = serializers.BooleanField(read_only=True)
    effective_generate_memories = serializers.BooleanField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)


class TaskFlagsSerializer(serializers.Serializer):
    task_id = serializers.IntegerField()
    use_memories = serializers.BooleanField(allow_null=True)
    generate_memories = serializers.BooleanField(allow_null=True)
    effective_use_memories = serializers.BooleanField(
        help_text="What applies to this task: the flag if set, else the user's setting."
    )
    effective_generate_memories = serializers.BooleanField()
    updated_at = serializers.DateTimeField(allow_null=True)


class RunInputSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    force = StrictBooleanField(required=False, default=False)


class SkipCountsSerializer(serializers.Serializer):
    generate_disabled = serializers.IntegerField()
    not_idle = serializers.IntegerField()
    missing_timestamps = serializers.IntegerField()
    duration_too_short = serializers.IntegerField()
    result_too_short = serializers.IntegerField()
    external_context = serializers.IntegerField()
    quota_low = serializers.IntegerField()
    quota_check_failed = serializers.IntegerField()
    private_content = serializers.IntegerField()
    already_known = serializers.IntegerField(
        help_text="Consolidation found the task's knowledge already in a memory."
    )
    no_durable_signal = serializers.IntegerField(
        help_text="Nothing durable to remember: the extraction model's judgement, or a result "
        "that adds nothing to the goal."
    )
    model_unavailable = serializers.IntegerField(
        help_text="The memory model did not answer (timeout, connection, 429, 5xx): retried "
        "later with a back-off."
    )
    memory_budget_exhausted = serializers.IntegerField(
        help_text="The monthly memory budget is used up: retried next month."
    )


class ExtractionCountsSerializer(serializers.Serializer):
    new = serializers.IntegerField()
    superseded = serializers.IntegerField()
    superseded_on_write = serializers.IntegerField(
        help_text="Written, and superseded at once by the active memory of a task of the "
        "same goal that finished later."
    )
    merged = serializers.IntegerField(help_text="Merged into an existing memory.")
    held_for_author = serializers.IntegerField(
        help_text="Written and held for its author: the task received their private memories "
        "in a project with other members."
    )


class RunSummarySerializer(serializers.Serializer):
    scanned = serializers.IntegerField()
    extracted = serializers.IntegerField(
        help_text="Tasks logged extracted by this run (the sum of `extractions`)."
    )
    extractions = ExtractionCountsSerializer(help_text="The extracted tasks by log reason.")
    superseded = serializers.IntegerField(
        help_text="Memories this run made superseded: older ones replaced, new ones "
        "superseded as soon as written, and those a consolidation replaced."
    )
    retracted = serializers.IntegerField(
        help_text="Memories withdrawn because their task saw external context after they "
        "were written."
    )
    skipped = SkipCountsSerializer()
    errors = serializers.IntegerField()
    model_calls = serializers.IntegerField(
        help_text="Model calls this run made (extraction and consolidation, repairs included)."
    )
    deferred = serializers.IntegerField(
        help_text="Tasks left untouched for the next run: the run's model call cap was reached."
    )
    forced = serializers.BooleanField()


class AutoMemoryLogFilterInput(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    reason = serializers.ChoiceField(choices=Reason.choices, required=False)


AUTO_MEMORY_LOG_OUTPUT: tuple[OutputField, ...] = (
    column("task_id", drf=serializers.IntegerField()),
    OutputField(
        "project_id",
        reads={"project_id": F("task__project_id")},
        drf=serializers.IntegerField(source="task.project_id"),
    ),
    column("outcome", drf=serializers.ChoiceField(choices=Outcome.choices)),
    column("reason", drf=serializers.ChoiceField(choices=Reason.choices)),
    column("memory_id", drf=serializers.IntegerField(allow_null=True)),
    column("forced"),
    column("attempts"),
    column("detail"),
    OutputField(
        "attempted_at",
        reads={"last_attempt_at": "last_attempt_at"},
        drf=serializers.DateTimeField(source="last_attempt_at"),
        when=True,
    ),
    column("first_attempt_at", when=True),
)


class AutoMemoryLogSerializer(RowOutput):
    class Meta:
        model = AutoMemoryLog
        output = AUTO_MEMORY_LOG_OUTPUT


class MemoryFeedbackFilterInput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=FeedbackKind.choices, required=False)


def _report_open(kind: str, closed_at) -> bool:
    return kind == FeedbackKind.REPORT and closed_at is None


MEMORY_FEEDBACK_OUTPUT: tuple[OutputField, ...] = (
    column("id"),
    column("kind", drf=serializers.ChoiceField(choices=FeedbackKind.choices)),
    column(
        "reason",
        drf=serializers.CharField(help_text="A report's reason: wrong, outdated or unsafe."),
    ),
    column("note", drf=serializers.CharField(help_text="A report's note, redacted.")),
    column("via", drf=serializers.ChoiceField(choices=FeedbackVia.choices)),
    column(
        "task_id",
        drf=serializers.IntegerField(
            allow_null=True, help_text="The task that said it; null for a person's report."
        ),
    ),
    column("repeat"),
    OutputField(
        "open",
        reads={"closed_at": "closed_at"},
        value=lambda row: _report_open(row["kind"], row["closed_at"]),
        drf=ObjectValue(
            lambda feedback: _report_open(feedback.kind, feedback.closed_at),
            serializers.BooleanField(
                help_text="A report that still holds the memory (no owner approved it since)."
            ),
        ),
    ),
    column("closed_at", when=True),
    column("created_at", when=True),
)


class MemoryFeedbackSerializer(RowOutput):
    class Meta:
        model = MemoryFeedback
        output = MEMORY_FEEDBACK_OUTPUT


class ReportInputSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    reason = serializers.ChoiceField(
        choices=ReportReason.choices, help_text="How the memory misled: wrong, outdated, unsafe."
    )
    note = StrictTextField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="What was wrong with it (redacted and cut to 500 characters when stored).",
    )


class ReportSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    memory_id = serializers.IntegerField()
    task_id = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    note = serializers.CharField()
    via = serializers.CharField()
    repeat = serializers.BooleanField(
        help_text="You reported this memory before, and a project owner approved it since."
    )
    created_at = serializers.DateTimeField()
    held = serializers.BooleanField(
        help_text="The memory is held out of injection and search until a project owner "
        "reviews it (POST /memories/{id}/approve)."
    )


# The preview reads the prompt and goal from the query string; the ranking reads no more.
PREVIEW_TEXT_MAX_CHARS = 20_000


class PreviewInput(RejectUnknownFieldsMixin, serializers.Serializer):
    prompt = StrictTextField(max_length=PREVIEW_TEXT_MAX_CHARS, trim_whitespace=False)
    goal = StrictTextField(
        max_length=PREVIEW_TEXT_MAX_CHARS, trim_whitespace=False, required=False, allow_blank=True
    )
    branch = BranchField(
        required=False,
        help_text="The branch the task would be on (the repository's default when absent): "
        "memories citing code are checked against its head now.",
    )


class PreviewCitationSerializer(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    commit = serializers.CharField()
    state = serializers.CharField(
        help_text="fresh, moved (the line numbers follow the lines), or unchecked (the code "
        "could not be read: the block says so)."
    )


class PreviewMemorySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField()
    rank = serializers.IntegerField(help_text="Its rank within its scope, 1 being the best.")
    score = serializers.FloatField(
        allow_null=True,
        help_text="The full-text ranking score (higher is better; comparable only within one "
        "preview); null when the memory came in as one of the newest.",
    )
    citations = PreviewCitationSerializer(many=True, help_text="The code it cites, as checked.")


class PreviewLeftOutSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField()
    reason = serializers.ChoiceField(
        choices=[
            "budget",
            "ranked_below",
            "reported",
            "archived",
            "awaiting_approval",
            "stale_code",
            "other_branch",
        ],
        help_text="budget: no room left in injection_max_chars; ranked_below: beyond its "
        "scope's limit; reported: held for review after a report; archived: retired by the "
        "retention rule; awaiting_approval: instruction-like text not yet approved; "
        "stale_code: the code it cites changed or is gone; other_branch: drawn on a branch "
        "not merged into the default branch yet.",
    )


class PreviewSerializer(serializers.Serializer):
    use_memories = serializers.BooleanField(
        help_text="Whether a new task of yours gets memories at all (your setting)."
    )
    injection_ranking = serializers.CharField()
    injection_max_chars = serializers.IntegerField()
    memory_ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="What the task would receive, in order."
    )
    block = serializers.CharField(help_text="The text put in front of its prompt.")
    memories = PreviewMemorySerializer(many=True)
    left_out = PreviewLeftOutSerializer(many=True)
