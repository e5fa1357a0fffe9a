"""The memory tools as JSON endpoints: `POST /memory-tools/<tool>` under a task key.

The agent's stdio MCP server `memory` (automemory/memory_relay.py) relays each call here, so
nothing in the agent's process tree needs the database. `Authorization: Bearer <task key>`
(`automemory.services.task_keys`) is the only credential these endpoints take, and they
are the only ones that take it: no API token, no session. The views validate the body,
call `automemory.services.memory_tools` (which throttles, logs and answers as the tools
always have) and serialize its answer. See docs/memory-tools.md.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from automemory import conf
from automemory.models import ReportReason
from automemory.services import memory_tools as tools
from controlplane.api.common import RejectUnknownFieldsMixin, validated
from controlplane.api.serializers import StrictIntegerField
from controlplane.api.throttling import AnonymousRateAuthentication
from controlplane.models import Task

KEYWORD = "Bearer"


class TaskKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <task key>`: the running task the key was minted for (its user
    as `request.user`, the task as `request.auth`). A key that is malformed, unknown, or
    whose turn is over is a 401. The header is parsed here, so no header fails with a 500."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        scheme, *parts = header.split() or [""]
        if scheme.lower() != KEYWORD.lower():
            return None
        if len(parts) != 1:
            raise exceptions.AuthenticationFailed("Invalid task key header.")
        view = (request.parser_context or {}).get("view")
        tool = getattr(view, "tool", "memory tool")
        try:
            task = tools.tool_authenticate(key=parts[0], tool=tool)
        except tools.KeyRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return (task.user, task)

    def authenticate_header(self, request) -> str:
        return f'{KEYWORD} realm="memory-tools"'


class TaskKeyScheme(OpenApiAuthenticationExtension):
    target_class = TaskKeyAuthentication
    name = "taskKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A running task's memory tool key (`cpm_...`), valid for its turn.",
        }


class HoldsTaskKey(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, Task)


# --- Input: the MCP tools' parameters, strictly typed (a JSON string, a JSON integer) ---


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _memory_id_field(**kwargs) -> StrictIntegerField:
    wanted = tools.ID_WANTED
    return StrictIntegerField(
        min_value=1,
        max_value=tools.MAX_ID,
        error_messages={"invalid": wanted, "min_value": wanted, "max_value": wanted},
        **kwargs,
    )


def _note_field(help_text: str) -> StrictCharField:
    return StrictCharField(
        required=False, default="", allow_blank=True, trim_whitespace=False, help_text=help_text
    )


class ToolSearchInput(RejectUnknownFieldsMixin, serializers.Serializer):
    query = StrictCharField(
        trim_whitespace=False,
        error_messages={"blank": tools.QUERY_WANTED},
        help_text="What to look for, in words.",
    )

    def get_fields(self):
        most = conf.get("SEARCH_MAX_RESULTS")  # a setting: read when the body is checked
        wanted = f"a whole number from 1 to {most} is required."
        return {
            **super().get_fields(),
            "limit": StrictIntegerField(
                required=False,
                default=5,
                min_value=1,
                max_value=most,
                error_messages={"invalid": wanted, "min_value": wanted, "max_value": wanted},
                help_text="How many at most.",
            ),
        }


class ToolGetInput(RejectUnknownFieldsMixin, serializers.Serializer):
    id = _memory_id_field(help_text="A memory id.")


class ToolCiteInput(RejectUnknownFieldsMixin, serializers.Serializer):
    ids = serializers.ListField(
        child=_memory_id_field(),
        allow_empty=False,
        min_length=1,
        error_messages={
            "not_a_list": tools.IDS_WANTED,
            "empty": tools.IDS_WANTED,
            "min_length": tools.IDS_WANTED,
        },
        help_text="Memory ids you used.",
    )
    note = _note_field("Optional: how they helped.")


class ToolReportInput(RejectUnknownFieldsMixin, serializers.Serializer):
    id = _memory_id_field(help_text="The memory that misled you.")
    reason = serializers.ChoiceField(
        choices=ReportReason.values, help_text="What is wrong with it."
    )
    note = _note_field("Optional: what is wrong with it.")


# --- Output: the tools' answers, as the MCP tools have always given them ---


class ToolCitationOutput(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    commit = serializers.CharField()
    state = serializers.CharField(help_text="fresh, moved or unchecked (not read: verify it).")


class ToolMemoryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField()
    content = serializers.CharField()
    created_at = serializers.CharField()
    citations = ToolCitationOutput(
        many=True, required=False, help_text="memory_search: the code it cites, as checked."
    )


class ToolSearchAnswer(serializers.Serializer):
    about = serializers.CharField()
    memories = ToolMemoryOutput(many=True)
    left_out_for_size = serializers.IntegerField()


class ToolGetAnswer(serializers.Serializer):
    about = serializers.CharField()
    memory = ToolMemoryOutput()


class ToolCiteAnswer(serializers.Serializer):
    counted = serializers.ListField(child=serializers.IntegerField())
    already = serializers.ListField(child=serializers.IntegerField())
    ignored = serializers.ListField(child=serializers.IntegerField())


class ToolReportAnswer(serializers.Serializer):
    reported = serializers.IntegerField()
    held_for_review = serializers.BooleanField()


class ToolRefusalOutput(serializers.Serializer):
    detail = serializers.CharField()


def _refused(description: str) -> OpenApiResponse:
    return OpenApiResponse(ToolRefusalOutput, description=description)


REFUSALS = {
    400: OpenApiResponse(description="Invalid input: `{field: [messages]}`; nothing is done."),
    401: _refused("No task key, or a key that is malformed, unknown, or whose turn is over."),
    429: _refused("Over the task's `memory_tool` rate or its user's `user` rate (Retry-After)."),
}
NOT_FOUND = {404: _refused("No such memory for this task (whether it exists or not).")}
CONFLICT = {409: _refused("The task has reported the most it may, or the memory was deleted.")}


def _refusal(exc: tools.ToolRefused) -> Response:
    if isinstance(exc, tools.ArgumentRefused):
        return Response({exc.field: [exc.message]}, status=400)
    headers = {"Retry-After": str(exc.wait)} if isinstance(exc, tools.ToolThrottled) else None
    return Response({"detail": str(exc)}, status=exc.status_code, headers=headers)


class _ToolView(APIView):
    authentication_classes = [TaskKeyAuthentication, AnonymousRateAuthentication]
    permission_classes = [HoldsTaskKey]
    # The service throttles each call (per task, and against its user's `user` rate).
    throttle_classes: list = []
    tool = "memory tool"

    def answer(self, call, output, **arguments) -> Response:
        try:
            return Response(output(call(**arguments)).data)
        except tools.ToolRefused as exc:
            return _refusal(exc)


class MemorySearchView(_ToolView):
    """Search this project's memories (and your own): the best matches first, with each
    memory's id, scope and text. What it returns counts as shown to the task."""

    tool = "memory_search"

    @extend_schema(request=ToolSearchInput, responses={200: ToolSearchAnswer, **REFUSALS})
    def post(self, request: Request) -> Response:
        data = validated(ToolSearchInput, request.data)
        return self.answer(tools.tool_search, ToolSearchAnswer, task=request.auth, **data)


class MemoryGetView(_ToolView):
    """One memory by id (from the injected block's `#<id>` labels or a search)."""

    tool = "memory_get"

    @extend_schema(request=ToolGetInput, responses={200: ToolGetAnswer, **REFUSALS, **NOT_FOUND})
    def post(self, request: Request) -> Response:
        data = validated(ToolGetInput, request.data)
        return self.answer(tools.tool_get, ToolGetAnswer, task=request.auth, memory_id=data["id"])


class MemoryCiteView(_ToolView):
    """Say which memories you relied on (ids shown to this task: injected or found); ids
    never shown are listed as ignored."""

    tool = "memory_cite"

    @extend_schema(request=ToolCiteInput, responses={200: ToolCiteAnswer, **REFUSALS})
    def post(self, request: Request) -> Response:
        data = validated(ToolCiteInput, request.data)
        return self.answer(tools.tool_cite, ToolCiteAnswer, task=request.auth, **data)


class MemoryReportView(_ToolView):
    """Report a memory the task was shown as wrong, outdated or unsafe: it is held out of
    memory until a project owner reviews it."""

    tool = "memory_report"

    @extend_schema(
        request=ToolReportInput,
        responses={200: ToolReportAnswer, **REFUSALS, **NOT_FOUND, **CONFLICT},
    )
    def post(self, request: Request) -> Response:
        data = validated(ToolReportInput, request.data)
        return self.answer(
            tools.tool_report,
            ToolReportAnswer,
            task=request.auth,
            memory_id=data["id"],
            reason=data["reason"],
            note=data["note"],
        )


VIEWS = {
    view.tool: view for view in (MemorySearchView, MemoryGetView, MemoryCiteView, MemoryReportView)
}
