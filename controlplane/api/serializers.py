"""Input and output shapes of the host API. No logic: services decide, serializers validate."""

from decimal import ROUND_DOWN

from django.contrib.auth import get_user_model
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.access import held_for_others
from controlplane.api.common import RejectUnknownFieldsMixin
from controlplane.api.memory_serializers import MemoryOutput  # noqa: F401 (the API's memory)
from controlplane.api.row_output import OutputField, RowOutput, column
from controlplane.limits import (
    GOAL_MAX_CHARS,
    MEMORY_CITATION_MAX_LINE,
    MEMORY_CITATION_PATH_MAX_CHARS,
    MEMORY_MAX_CHARS,
    MEMORY_MAX_CITATIONS,
    MESSAGE_MAX_CHARS,
    PROJECT_NAME_MAX_CHARS,
    PROMPT_MAX_CHARS,
)
from controlplane.models import (
    API_TOKEN_SHOWN_FIELDS,
    USAGE_TOKEN_FIELDS,
    ApiToken,
    IdentityMemory,
    Membership,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    Project,
    Role,
    Task,
    TaskFollowup,
    TaskKind,
    TaskStatus,
    UsageRecord,
    task_title,
)
from controlplane.repository_urls import BRANCH_MAX_CHARS
from controlplane.services.tasks import task_injected_memory_ids, task_text_for
from controlplane.services.tokens import TOKEN_EXPIRES_MAX_DAYS, TOKEN_NAME_MAX_CHARS

MAX_ID = 2**63 - 1
USERNAME_MAX_CHARS = get_user_model()._meta.get_field("username").max_length


class StrictTextField(serializers.CharField):
    """A string field that accepts only JSON strings (not numbers) and no blank text.

    DRF's CharField already refuses NUL characters and lone surrogates.
    """

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if not self.allow_blank and not data.strip():
            self.fail("blank")
        return super().to_internal_value(data)


class BranchField(StrictTextField):
    """A branch name of a project's repository (at most BRANCH_MAX_CHARS characters)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_length=BRANCH_MAX_CHARS, **kwargs)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not a string, float or boolean)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class IdField(serializers.IntegerField):
    """A positive database id: a JSON integer in range (not a string, float or boolean)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


# --- Projects -------------------------------------------------------------------------------


class ProjectCreateInput(RejectUnknownFieldsMixin, serializers.Serializer):
    name = StrictTextField(max_length=PROJECT_NAME_MAX_CHARS)


class ProjectOutput(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True)
    role = serializers.CharField(
        source="my_role", read_only=True, help_text="The caller's role in the project."
    )

    class Meta:
        model = Project
        fields = ["id", "name", "created_by", "created_at", "role"]


class MembershipInput(RejectUnknownFieldsMixin, serializers.Serializer):
    username = StrictTextField(max_length=USERNAME_MAX_CHARS)
    role = serializers.ChoiceField(choices=Role.choices)


class MembershipOutput(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at", "updated_at"]


# --- Tasks ----------------------------------------------------------------------------------


class TaskCreateInput(RejectUnknownFieldsMixin, serializers.Serializer):
    prompt = StrictTextField(max_length=PROMPT_MAX_CHARS, trim_whitespace=False)
    goal = StrictTextField(
        max_length=GOAL_MAX_CHARS,
        trim_whitespace=False,
        required=False,
        allow_null=True,
        help_text="A goal task: the executor runs the goal in preference to the prompt.",
    )
    kind = serializers.ChoiceField(choices=TaskKind.choices, default=TaskKind.STANDARD)
    parent_task_id = IdField(
        required=False, allow_null=True, help_text="A task of the same project."
    )
    branch = BranchField(
        required=False,
        help_text="The repository's branch to work on (default: its default branch); only on "
        "a project with a repository.",
    )


class TaskFilterInput(serializers.Serializer):
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)


_TASK_COST = serializers.DecimalField(
    max_digits=14, decimal_places=6, coerce_to_string=False, read_only=True
)

TASK_SUMMARY_OUTPUT: tuple[OutputField, ...] = (
    column("id"),
    column("project_id"),
    OutputField(
        "user",
        reads={"user_name": F("user__username")},
        drf=serializers.CharField(source="user.username", read_only=True),
    ),
    OutputField(
        "title",
        # The head of the goal (or prompt), annotated by `selectors.task_list`.
        reads={"title_source": "title_source"},
        value=lambda row: task_title(row["title_source"] or ""),
        drf=serializers.CharField(
            read_only=True,
            help_text="First line of the goal (or the prompt), at most 200 characters.",
        ),
    ),
    column("kind"),
    column("parent_task_id"),
    column("status"),
    column("turn"),
    OutputField(
        "cost_usd",
        reads={"cost_usd": "cost_usd"},
        value=lambda row: _TASK_COST.to_representation(row["cost_usd"]),
        drf=_TASK_COST,
    ),
    column("created_at", when=True),
    column("queued_at", when=True),
    column("started_at", when=True),
    column("finished_at", when=True),
    column("updated_at", when=True),
)


class TaskSummaryOutput(RowOutput):
    """A task in a list: everything but the long texts, plus a one-line title."""

    class Meta:
        model = Task
        output = TASK_SUMMARY_OUTPUT


class ChangedFileOutput(serializers.Serializer):
    path = serializers.CharField()
    status = serializers.ChoiceField(
        choices=["added", "modified", "deleted", "renamed", "copied", "type_changed", "other"]
    )


class InjectedMemoryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField(help_text="The memory's API path (`GET /memories/{id}`).")
    scope = serializers.ChoiceField(choices=MemoryScope.choices)
    status = serializers.ChoiceField(choices=MemoryStatus.choices)


class TaskDetailOutput(TaskSummaryOutput):
    injected_memory_ids = serializers.SerializerMethodField(
        help_text="The ids of the memories injected into the first turn, in order."
    )
    injected_memories = serializers.SerializerMethodField(
        help_text="The memories injected into the first turn (of `injected_memory_ids`, "
        "those not forgotten since), with links."
    )
    branch = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The repository branch the task works on; null without a repository.",
    )
    base_commit = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The commit its first turn started from (resolved at claim); null before.",
    )
    head_commit = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The head of its branch `controlplane/task-<id>` after the latest turn that "
        "changed files; null until one did.",
    )
    changed_files = ChangedFileOutput(
        many=True,
        read_only=True,
        help_text="The paths its branch changes against `base_commit` (`GET /tasks/{id}/diff` "
        "has the diff).",
    )

    class Meta(TaskSummaryOutput.Meta):
        fields = [
            *TaskSummaryOutput.Meta.fields,
            "prompt",
            "goal",
            "continuation_prompt",
            "is_resume",
            "result_text",
            "failure_reason",
            "executor",
            "thread_id",
            "worker_id",
            "heartbeat_at",
            "injected_memory_ids",
            "injected_memories",
            "branch",
            "base_commit",
            "head_commit",
            "changed_files",
        ]

    def to_representation(self, task: Task) -> dict:
        """What agents wrote, as the reader may see it (`task_text_for`); a repository's
        fields null where the task has none yet."""
        data = super().to_representation(task)
        for name in ("branch", "base_commit", "head_commit"):
            data[name] = data[name] or None
        viewer = self.context["request"].user if "request" in self.context else None
        for name in ("result_text", "failure_reason"):
            data[name] = task_text_for(task=task, viewer=viewer, text=data[name])
        return data

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_injected_memory_ids(self, task: Task) -> list[int]:
        return self._injected_ids(task)

    def _injected_ids(self, task: Task) -> list[int]:
        """The injected ids, read once per task (`task_injected_memory_ids`)."""
        cache = self.context.setdefault("injected_ids", {})
        if task.pk not in cache:
            cache[task.pk] = task_injected_memory_ids(task)
        return cache[task.pk]

    @extend_schema_field(InjectedMemoryOutput(many=True))
    def get_injected_memories(self, task: Task) -> list[dict]:
        """The memories injected into the task's first turn that still exist (one query)."""
        ids = self._injected_ids(task)
        if not ids:
            return []
        viewer = self.context["request"].user if "request" in self.context else None
        rows = (
            IdentityMemory.objects.filter(pk__in=ids)
            .exclude(held_for_others(viewer))
            .values("id", "scope", "status")
        )
        found = {row["id"]: row for row in rows}
        return [
            {**found[pk], "url": reverse("memory", kwargs={"memory_id": pk})}
            for pk in ids
            if pk in found
        ]


class TaskContinueInput(RejectUnknownFieldsMixin, serializers.Serializer):
    prompt = StrictTextField(max_length=PROMPT_MAX_CHARS, trim_whitespace=False)


class FollowupInput(RejectUnknownFieldsMixin, serializers.Serializer):
    from_task_id = IdField(
        required=False, allow_null=True, help_text="The sending task; one you can see."
    )
    message = StrictTextField(max_length=MESSAGE_MAX_CHARS, trim_whitespace=False)


class FollowupOutput(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = TaskFollowup
        fields = ["id", "task_id", "from_task_id", "message", "created_by", "created_at"]


class TaskRunOutput(serializers.ModelSerializer):
    """One run of a task in the usage ledger: its own tokens and cost (not the thread's)."""

    task_id = serializers.IntegerField(read_only=True, allow_null=True)
    cost_usd = serializers.DecimalField(
        max_digits=14, decimal_places=6, coerce_to_string=False, read_only=True
    )

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "task_id",
            "kind",
            "turn",
            "finished_at",
            "executor",
            "model",
            "thread_id",
            *USAGE_TOKEN_FIELDS,
            "cost_usd",
        ]


# --- Memories -------------------------------------------------------------------------------


# --- Memory citations (kept by an app: controlplane.services.memory_citations) ----------------


class CitationInput(RejectUnknownFieldsMixin, serializers.Serializer):
    """Lines of a file in the project's repository, checked against its default branch."""

    path = StrictTextField(max_length=MEMORY_CITATION_PATH_MAX_CHARS, trim_whitespace=False)
    start_line = StrictIntegerField(min_value=1, max_value=MEMORY_CITATION_MAX_LINE)
    end_line = StrictIntegerField(min_value=1, max_value=MEMORY_CITATION_MAX_LINE)

    def validate(self, attrs):
        if attrs["end_line"] < attrs["start_line"]:
            raise serializers.ValidationError({"end_line": ["must not be before start_line"]})
        return attrs


def _citations_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=CitationInput(),
        max_length=MEMORY_MAX_CITATIONS,
        required=False,
        help_text=f"Lines of the project's code the memory speaks of (at most "
        f"{MEMORY_MAX_CITATIONS}); each is checked against the repository's default branch.",
        **kwargs,
    )


class MemoryInput(RejectUnknownFieldsMixin, serializers.Serializer):
    content = StrictTextField(max_length=MEMORY_MAX_CHARS)
    citations = _citations_field()


class MemoryUpdateInput(RejectUnknownFieldsMixin, serializers.Serializer):
    content = StrictTextField(
        max_length=MEMORY_MAX_CHARS, required=False, help_text="Absent: nothing changes."
    )
    citations = _citations_field(allow_empty=True)


class NoInput(RejectUnknownFieldsMixin, serializers.Serializer):
    """An action's body: nothing (an empty JSON object or no body at all)."""


class MemoryFilterInput(serializers.Serializer):
    status = serializers.ChoiceField(choices=MemoryStatus.choices, required=False)
    source = serializers.ChoiceField(choices=MemorySource.choices, required=False)


# --- Quota ----------------------------------------------------------------------------------


def _monthly_limit_field(**kwargs) -> serializers.DecimalField:
    """`Quota.monthly_limit_usd` in and out of the API, at the model's precision."""
    return serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True, **kwargs)


class QuotaOutput(serializers.Serializer):
    monthly_limit_usd = _monthly_limit_field(
        coerce_to_string=False, help_text="null means unlimited."
    )
    spent_usd = serializers.DecimalField(
        max_digits=20,
        decimal_places=6,
        coerce_to_string=False,
        help_text="What runs finished this UTC month cost (whenever their task was created).",
    )
    remaining_percent = serializers.DecimalField(
        max_digits=5,
        decimal_places=2,
        coerce_to_string=False,
        rounding=ROUND_DOWN,
        help_text="Rounded down to 2 decimals for display; gates compare the exact value.",
    )


class QuotaInput(RejectUnknownFieldsMixin, serializers.Serializer):
    monthly_limit_usd = _monthly_limit_field(
        min_value=0, help_text="USD per calendar month (UTC); null means unlimited."
    )


# --- API tokens -----------------------------------------------------------------------------


class TokenCreateInput(RejectUnknownFieldsMixin, serializers.Serializer):
    name = StrictTextField(max_length=TOKEN_NAME_MAX_CHARS, help_text="What the token is for.")
    expires_in_days = StrictIntegerField(
        min_value=1,
        max_value=TOKEN_EXPIRES_MAX_DAYS,
        required=False,
        allow_null=True,
        help_text="Days until the token expires; null or absent: it does not expire.",
    )


class TokenOutput(serializers.ModelSerializer):
    prefix = serializers.CharField(
        read_only=True, help_text="The key's first characters, to tell tokens apart."
    )
    active = serializers.SerializerMethodField(help_text="Neither revoked nor expired.")

    class Meta:
        model = ApiToken
        fields = ["id", *API_TOKEN_SHOWN_FIELDS, "active"]
        read_only_fields = fields  # all always present in responses

    def get_active(self, token: ApiToken) -> bool:
        return token.revoked_at is None and (
            token.expires_at is None or token.expires_at > timezone.now()
        )


class TokenCreatedOutput(TokenOutput):
    token = serializers.CharField(read_only=True, help_text="The key: shown in this response only.")

    class Meta(TokenOutput.Meta):
        fields = [*TokenOutput.Meta.fields, "token"]
        read_only_fields = fields
