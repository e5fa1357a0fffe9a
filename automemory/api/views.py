"""Auto memory endpoints: each states its access rule, input, output and the one service or
selector it calls (`controlplane.api.common.endpoint`)."""

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiResponse
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
from controlplane.access import CREATE_TASK, READ, memory_get_for_change, memory_get_for_read
from controlplane.api.common import Call, endpoint, memory_access, project_access, task_access
from controlplane.api.prepared import PreparedList
from controlplane.api.serializers import MemoryOutput
from controlplane.errors import ConflictError
from controlplane.models import IdentityMemory, MemoryVisibility

# The list reads whose statement is built once per shape (`controlplane.api.prepared`), from
# ids standing for unsaved objects the selectors read the keys of.
EXTRACTION_LOG = PreparedList(
    lambda user_id, **filters: s.AutoMemoryLogSerializer.rows(
        selectors.auto_memory_log_list(user=get_user_model()(pk=user_id)).filter(**filters)
    )
)
MEMORY_FEEDBACK = PreparedList(
    lambda memory_id, **filters: s.MemoryFeedbackSerializer.rows(
        selectors.memory_feedback_list(memory=IdentityMemory(pk=memory_id)).filter(**filters)
    )
)


def _settings_body(settings) -> dict:
    body = {name: getattr(settings, name) for name in SETTINGS_FIELDS}
    body["updated_at"] = settings.updated_at
    return body


class AutoMemorySettingsView(APIView):
    """The caller's auto memory settings. PUT and PATCH both change only the fields sent."""

    get = endpoint(
        lambda call: _settings_body(settings_get(user_id=call.user.pk)),
        output=s.AutoMemorySettingsSerializer,
    )
    put = patch = endpoint(
        lambda call: _settings_body(settings_update(user=call.user, changes=call.data)),
        body=s.AutoMemorySettingsSerializer,
        output=s.AutoMemorySettingsSerializer,
    )


def _flags_body(task) -> dict:
    flags = flags_get(task_id=task.pk)
    prefs = settings_get(user_id=task.user_id)
    return {
        "task_id": task.pk,
        "use_memories": flags.use_memories,
        "generate_memories": flags.generate_memories,
        "effective_use_memories": effective_switch(flags.use_memories, prefs.use_memories),
        "effective_generate_memories": effective_switch(
            flags.generate_memories, prefs.generate_memories
        ),
        "updated_at": flags.updated_at,
    }


def _flags_set(call: Call) -> dict:
    flags_set(task=call.task, actor=call.user, changes=call.data)
    return _flags_body(call.task)


class TaskAutoMemoryFlagsView(APIView):
    """Per-task overrides of `use_memories` / `generate_memories` (null follows the user)."""

    get = endpoint(
        lambda call: _flags_body(call.task),
        access=task_access(READ),
        output=s.TaskFlagsSerializer,
    )
    post = endpoint(
        _flags_set,
        access=task_access(CREATE_TASK),
        body=s.TaskFlagsInputSerializer,
        output=s.TaskFlagsSerializer,
    )


def _sweep_run(call: Call):
    try:
        summary = process_auto_memories(user=call.user, force=call.data["force"])
    except SweepBusy as busy:
        return Response(
            busy.as_body(), status=busy.status_code, headers={"Retry-After": busy.retry_after}
        )
    return summary.as_dict()


class AutoMemoryRunView(APIView):
    """Run the extraction sweep over the caller's own tasks now and return what it did."""

    post = endpoint(
        _sweep_run, body=s.RunInputSerializer, output=s.RunSummarySerializer, conflict=True
    )


class AutoMemoryLogView(APIView):
    """The extraction log of the caller's own tasks: one row per task, newest attempt first."""

    # The row's project comes with it (`rows`); the task row itself (its result) is never read.
    get = endpoint(
        lambda call: EXTRACTION_LOG.bind(user_id=call.user.pk, **call.data),
        query=s.AutoMemoryLogFilterInput,
        output=s.AutoMemoryLogSerializer,
        page=True,
    )


class MemoryFeedbackView(APIView):
    """What tasks and people said of a memory, newest first: each cite (a task used it) and
    report (it misled, with the reason and the redacted note), filtered by `kind`. Anyone who
    can read the memory; who reported is not shown."""

    get = endpoint(
        lambda call: MEMORY_FEEDBACK.bind(memory_id=call.memory.pk, **call.data),
        access=memory_access(memory_get_for_read),
        query=s.MemoryFeedbackFilterInput,
        output=s.MemoryFeedbackSerializer,
        page=True,
    )


def _memory_report(call: Call) -> dict:
    report = memory_report(
        memory=call.memory,
        reason=call.data["reason"],
        note=call.data.get("note", ""),
        user=call.user,
        via=FeedbackVia.PERSON,
    )
    return {
        "id": report.pk,
        "memory_id": call.memory.pk,
        "task_id": report.task_id,
        "reason": report.reason,
        "note": report.note,
        "via": report.via,
        "repeat": report.repeat,
        "created_at": report.created_at,
        "held": True,
    }


class MemoryReportView(APIView):
    """Report a memory that misled: it is held out of injection and search until a project
    owner reviews it. Anyone who can read the memory may report it, once while their report
    is open (again: 400); after an owner approved it, again only with a reason or note not
    given before (a `repeat`); at most `AUTOMEMORY_REPORTS_PER_PERSON_HOUR` reports of a
    project's memories an hour (429)."""

    post = endpoint(
        _memory_report,
        access=memory_access(memory_get_for_read),
        body=s.ReportInputSerializer,
        output=s.ReportSerializer,
        status=201,
        responses={
            429: OpenApiResponse(description="Over the person's reports an hour: `{detail}`.")
        },
    )


class MemoryPreviewView(APIView):
    """What a new task with this prompt and goal, created by you in the project now, would
    receive, and what is left out and why. The same code as injection; it writes nothing."""

    get = endpoint(
        lambda call: _preview_body(
            memory_preview(
                user=call.user,
                project_id=call.project.pk,
                prompt=call.data["prompt"],
                goal=call.data.get("goal"),
                branch=call.data.get("branch"),
            )
        ),
        access=project_access(READ),
        query=s.PreviewInput,
        output=s.PreviewSerializer,
    )


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


def _memory_share(call: Call):
    memory = call.memory
    if memory.visibility != MemoryVisibility.AUTHOR or memory.created_by_id != call.user.pk:
        raise ConflictError("Only a memory held for you can be shared, by you.")
    return memory_share(user=call.user, memory=memory)


class MemoryShareView(APIView):
    """Share a memory held for you (drawn from a task that received your own memories): the
    project's members see it, and their tasks get it, from now on. Its author only."""

    post = endpoint(
        _memory_share,
        access=memory_access(memory_get_for_change),
        output=MemoryOutput,
        conflict=True,
    )
