"""Auto memory endpoints: validate input, call one service or selector, serialize output."""

from django.db.models import F, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from automemory import selectors
from automemory.api import serializers as s
from automemory.models import FeedbackVia
from automemory.services.extraction.sweep import SweepBusy, process_auto_memories
from automemory.services.feedback import memory_report
from automemory.services.injector import memory_preview
from automemory.services.preferences import (
    SETTINGS_FIELDS,
    effective_switch,
    flags_get,
    flags_set,
    settings_get,
    settings_update,
)
from automemory.services.sharing import memory_share
from controlplane.access import (
    CREATE_TASK,
    READ,
    memory_get_for_change,
    memory_get_for_read,
    project_get_for,
    task_get_for,
)
from controlplane.api.common import (
    MEMORY_ID,
    PAGING,
    PROJECT_ID,
    TASK_ID,
    errors,
    paginated,
    validated,
)
from controlplane.api.pagination import paginated_response
from controlplane.api.serializers import MemoryOutput
from controlplane.errors import ConflictError
from controlplane.models import MemoryVisibility


def _settings_body(settings) -> dict:
    body = {name: getattr(settings, name) for name in SETTINGS_FIELDS}
    body["updated_at"] = settings.updated_at
    return s.AutoMemorySettingsSerializer(body).data


class AutoMemorySettingsView(APIView):
    """The caller's auto memory settings. PUT and PATCH both change only the fields sent."""

    @extend_schema(responses={200: s.AutoMemorySettingsSerializer, **errors(401)})
    def get(self, request: Request) -> Response:
        return Response(_settings_body(settings_get(user_id=request.user.pk)))

    @extend_schema(
        request=s.AutoMemorySettingsSerializer,
        responses={200: s.AutoMemorySettingsSerializer, **errors(400, 401)},
    )
    def put(self, request: Request) -> Response:
        changes = validated(s.AutoMemorySettingsSerializer, request.data)
        return Response(_settings_body(settings_update(user=request.user, changes=changes)))

    @extend_schema(
        request=s.AutoMemorySettingsSerializer,
        responses={200: s.AutoMemorySettingsSerializer, **errors(400, 401)},
    )
    def patch(self, request: Request) -> Response:
        return self.put(request)


def _flags_body(task) -> dict:
    flags = flags_get(task_id=task.pk)
    prefs = settings_get(user_id=task.user_id)
    return s.TaskFlagsSerializer(
        {
            "task_id": task.pk,
            "use_memories": flags.use_memories,
            "generate_memories": flags.generate_memories,
            "effective_use_memories": effective_switch(flags.use_memories, prefs.use_memories),
            "effective_generate_memories": effective_switch(
                flags.generate_memories, prefs.generate_memories
            ),
            "updated_at": flags.updated_at,
        }
    ).data


class TaskAutoMemoryFlagsView(APIView):
    """Per-task overrides of `use_memories` / `generate_memories` (null follows the user)."""

    @extend_schema(
        parameters=[TASK_ID],
        responses={200: s.TaskFlagsSerializer, **errors(401, 404)},
    )
    def get(self, request: Request, task_id) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=READ)
        return Response(_flags_body(task))

    @extend_schema(
        parameters=[TASK_ID],
        request=s.TaskFlagsInputSerializer,
        responses={200: s.TaskFlagsSerializer, **errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, task_id) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=CREATE_TASK)
        changes = validated(s.TaskFlagsInputSerializer, request.data)
        flags_set(task=task, actor=request.user, changes=changes)
        return Response(_flags_body(task))


class AutoMemoryRunView(APIView):
    """Run the extraction sweep over the caller's own tasks now and return what it did."""

    @extend_schema(
        request=s.RunInputSerializer,
        responses={200: s.RunSummarySerializer, **errors(400, 401, 409)},
    )
    def post(self, request: Request) -> Response:
        force = validated(s.RunInputSerializer, request.data)["force"]
        try:
            summary = process_auto_memories(user=request.user, force=force)
        except SweepBusy as busy:
            return Response(
                busy.as_body(), status=busy.status_code, headers={"Retry-After": busy.retry_after}
            )
        return Response(s.RunSummarySerializer(summary.as_dict()).data)


class AutoMemoryLogView(APIView):
    """The extraction log of the caller's own tasks: one row per task, newest attempt first."""

    @extend_schema(
        parameters=[s.AutoMemoryLogFilterInput, *PAGING],
        responses={200: paginated(s.AutoMemoryLogSerializer), **errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        filters = validated(s.AutoMemoryLogFilterInput, request.query_params)
        # The row's project comes with it; the task row itself (its result) is never read.
        queryset: QuerySet = (
            selectors.auto_memory_log_list(user=request.user)
            .filter(**filters)
            .annotate(project_id=F("task__project_id"))
        )
        return paginated_response(request, self, queryset, s.AutoMemoryLogSerializer)


class MemoryReportView(APIView):
    """Report a memory that misled: it is held out of injection and search until a project
    owner reviews it. Anyone who can read the memory may report it, once while their report
    is open (again: 400); after an owner approved it, again only with a reason or note not
    given before (a `repeat`); at most `AUTOMEMORY_REPORTS_PER_PERSON_HOUR` reports of a
    project's memories an hour (429)."""

    @extend_schema(
        parameters=[MEMORY_ID],
        request=s.ReportInputSerializer,
        responses={
            201: s.ReportSerializer,
            429: OpenApiResponse(description="Over the person's reports an hour: `{detail}`."),
            **errors(400, 401, 404),
        },
    )
    def post(self, request: Request, memory_id) -> Response:
        memory = memory_get_for_read(user=request.user, memory_id=memory_id)
        data = validated(s.ReportInputSerializer, request.data)
        report = memory_report(
            memory=memory,
            reason=data["reason"],
            note=data.get("note", ""),
            user=request.user,
            via=FeedbackVia.PERSON,
        )
        body = {
            "id": report.pk,
            "memory_id": memory.pk,
            "task_id": report.task_id,
            "reason": report.reason,
            "note": report.note,
            "via": report.via,
            "repeat": report.repeat,
            "created_at": report.created_at,
            "held": True,
        }
        return Response(s.ReportSerializer(body).data, status=201)


class MemoryPreviewView(APIView):
    """What a new task with this prompt and goal, created by you in the project now, would
    receive, and what is left out and why. The same code as injection; it writes nothing."""

    @extend_schema(
        parameters=[PROJECT_ID, s.PreviewInput],
        responses={200: s.PreviewSerializer, **errors(400, 401, 404)},
    )
    def get(self, request: Request, project_id) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        data = validated(s.PreviewInput, request.query_params)
        plan = memory_preview(
            user=request.user,
            project_id=project.pk,
            prompt=data["prompt"],
            goal=data.get("goal"),
            branch=data.get("branch"),
        )
        return Response(s.PreviewSerializer(_preview_body(plan)).data)


def _preview_body(plan) -> dict:
    preferences = plan.preferences
    chosen = {memory_id: index for index, memory_id in enumerate(plan.memory_ids)}
    planned = sorted(
        (item for item in plan.candidates if item.memory.pk in chosen),
        key=lambda item: chosen[item.memory.pk],
    )
    return {
        "use_memories": preferences.use_memories,
        "injection_ranking": preferences.ranking,
        "injection_max_chars": preferences.max_chars,
        "memory_ids": plan.memory_ids,
        "block": plan.fitted.block if plan.fitted is not None else "",
        "memories": [
            {
                "id": item.memory.pk,
                "scope": item.scope,
                "rank": item.rank,
                "score": item.score,
                "citations": [c.as_output() for c in getattr(item.memory, "code_citations", [])],
            }
            for item in planned
        ],
        "left_out": [
            {"id": left.memory.pk, "scope": left.scope, "reason": left.reason}
            for left in plan.left_out
        ],
    }


class MemoryShareView(APIView):
    """Share a memory held for you (drawn from a task that received your own memories): the
    project's members see it, and their tasks get it, from now on. Its author only."""

    @extend_schema(
        parameters=[MEMORY_ID],
        request=None,
        responses={200: MemoryOutput, **errors(401, 404, 409)},
    )
    def post(self, request: Request, memory_id) -> Response:
        memory = memory_get_for_change(user=request.user, memory_id=memory_id)
        if memory.visibility != MemoryVisibility.AUTHOR or memory.created_by_id != request.user.pk:
            raise ConflictError("Only a memory held for you can be shared, by you.")
        shared = memory_share(user=request.user, memory=memory)
        return Response(MemoryOutput(shared, context={"request": request}).data)
