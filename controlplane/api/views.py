"""Host API views: each endpoint states its access rule, input, output and the one service or
selector it calls (`controlplane.api.common.endpoint`).

Access is decided in controlplane.access (404 for non-members, 403 for a missing
permission); this module only says which permission each action needs.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import selectors
from controlplane.access import (
    CONTINUE_TASK,
    CREATE_TASK,
    MANAGE_MEMBERS,
    READ,
    memory_get_for_approve,
    memory_get_for_change,
    memory_get_for_delete,
    memory_get_for_read,
)
from controlplane.api import schema as _schema_extensions  # noqa: F401
from controlplane.api import serializers as s
from controlplane.api.common import (
    Access,
    Call,
    endpoint,
    id_parameter,
    memory_access,
    project_access,
    task_access,
)
from controlplane.api.prepared import PreparedList
from controlplane.limits import text_problem
from controlplane.models import Project
from controlplane.services.memories import (
    memory_approve,
    memory_citations_set,
    memory_create,
    memory_delete,
    memory_restore,
    memory_update,
)
from controlplane.services.projects import membership_remove, membership_set, project_create
from controlplane.services.quota import quota_reset, quota_set, quota_status_get
from controlplane.services.tasks import followup_create, task_continue, task_create
from controlplane.services.tokens import (
    token_create,
    token_get_for_user,
    token_list,
    token_revoke,
)

# The list reads whose statement is built once per shape (`controlplane.api.prepared`): the
# caller and the project come as ids, standing for unsaved objects the selectors read the
# keys of.
PROJECT_TASKS = PreparedList(
    lambda user_id, project_id, status=None: s.TaskSummaryOutput.rows(
        selectors.task_list(
            user=get_user_model()(pk=user_id), project=Project(pk=project_id), status=status
        )
    )
)
PROJECT_MEMORIES = PreparedList(
    lambda user_id, project_id, **filters: s.MemoryOutput.rows(
        selectors.memory_list(
            user=get_user_model()(pk=user_id), project=Project(pk=project_id), **filters
        )
    )
)
MY_MEMORIES = PreparedList(
    lambda user_id, **filters: s.MemoryOutput.rows(
        selectors.memory_list(user=get_user_model()(pk=user_id), **filters)
    )
)

# --- Projects -------------------------------------------------------------------------------


class ProjectListView(APIView):
    get = endpoint(
        lambda call: selectors.project_list(user=call.user),
        output=s.ProjectOutput,
        page=True,
        operation_id="projects_list",
        summary="Projects the caller is a member of",
    )
    post = endpoint(
        lambda call: selectors.project_get(
            user=call.user, project=project_create(user=call.user, **call.data)
        ),
        body=s.ProjectCreateInput,
        output=s.ProjectOutput,
        status=201,
        operation_id="projects_create",
        summary="Create a project; the caller becomes its owner",
    )


class ProjectDetailView(APIView):
    get = endpoint(
        lambda call: selectors.project_get(user=call.user, project=call.project),
        access=project_access(READ),
        output=s.ProjectOutput,
        operation_id="projects_retrieve",
        summary="One project",
    )


def _membership_set(call: Call) -> Response:
    membership, created = membership_set(actor=call.user, project=call.project, **call.data)
    return Response(s.MembershipOutput(membership).data, status=201 if created else 200)


class ProjectMembersView(APIView):
    get = endpoint(
        lambda call: selectors.membership_list(project=call.project),
        access=project_access(READ),
        output=s.MembershipOutput,
        page=True,
        operation_id="projects_members_list",
        summary="Members of a project and their roles",
    )
    post = endpoint(
        _membership_set,
        access=project_access(MANAGE_MEMBERS),
        body=s.MembershipInput,
        output=s.MembershipOutput,
        status=(200, 201),
        conflict="The project's last owner cannot be demoted.",
        operation_id="projects_members_set",
        summary="Add a member or change a member's role (owner only)",
        description="201 when the user was added, 200 when an existing role was changed. "
        "409 when the change would leave the project without an owner.",
    )


class ProjectMemberView(APIView):
    delete = endpoint(
        lambda call: membership_remove(
            actor=call.user, project=call.project, username=call.path["username"]
        ),
        access=project_access(MANAGE_MEMBERS),
        parameters=[OpenApiParameter("username", OpenApiTypes.STR, OpenApiParameter.PATH)],
        conflict="The project's last owner cannot be removed.",
        operation_id="projects_members_remove",
        summary="Remove a member (owner only)",
        description="409 when it would leave the project without an owner. The removed "
        "user's queued tasks are refused when claimed, and their running tasks' memory "
        "keys stop working.",
    )


# --- Tasks ----------------------------------------------------------------------------------


class ProjectTasksView(APIView):
    get = endpoint(
        lambda call: PROJECT_TASKS.bind(
            user_id=call.user.pk, project_id=call.project.pk, **call.data
        ),
        access=project_access(READ),
        query=s.TaskFilterInput,
        output=s.TaskSummaryOutput,
        page=True,
        operation_id="projects_tasks_list",
        summary="Tasks of a project, newest first",
    )
    post = endpoint(
        lambda call: task_create(user=call.user, project=call.project, **call.data),
        access=project_access(CREATE_TASK),
        body=s.TaskCreateInput,
        output=s.TaskDetailOutput,
        status=201,
        operation_id="projects_tasks_create",
        summary="Queue a task (create_task: owner or member)",
    )


class TaskDetailView(APIView):
    get = endpoint(
        lambda call: call.task,
        access=task_access(READ),
        output=s.TaskDetailOutput,
        operation_id="tasks_retrieve",
        summary="One task, with its stored prompt and goal and its latest result",
    )


class TaskContinueView(APIView):
    post = endpoint(
        lambda call: task_continue(user=call.user, task=call.task, **call.data),
        access=task_access(CONTINUE_TASK),
        body=s.TaskContinueInput,
        output=s.TaskDetailOutput,
        conflict="The task is not finished (queued or running).",
        operation_id="tasks_continue",
        summary="Queue the next turn of a finished task (create_task)",
    )


class TaskFollowupsView(APIView):
    get = endpoint(
        lambda call: selectors.followup_list(task=call.task),
        access=task_access(READ),
        output=s.FollowupOutput,
        page=True,
        operation_id="tasks_followups_list",
        summary="Messages delivered to a task",
    )
    post = endpoint(
        lambda call: followup_create(user=call.user, task=call.task, **call.data),
        access=task_access(CREATE_TASK),
        body=s.FollowupInput,
        output=s.FollowupOutput,
        status=201,
        operation_id="tasks_followups_create",
        summary="Deliver a message to a task (create_task)",
    )


class TaskRunsView(APIView):
    get = endpoint(
        lambda call: selectors.usage_record_list_for_task(task=call.task),
        access=task_access(READ),
        output=s.TaskRunOutput,
        page=True,
        operation_id="tasks_runs_list",
        summary="A task's runs in the usage ledger: turn, finish time, tokens, cost, model",
        description="One row per finished run (turn), oldest first. Refused, re-queued and "
        "lost runs have no usage and no row. The task's `cost_usd` is the sum of its rows.",
    )


# --- Memories -------------------------------------------------------------------------------


class MyMemoriesView(APIView):
    get = endpoint(
        lambda call: MY_MEMORIES.bind(user_id=call.user.pk, **call.data),
        query=s.MemoryFilterInput,
        output=s.MemoryOutput,
        page=True,
        operation_id="users_me_memories_list",
        summary="The caller's user-level memories",
    )
    post = endpoint(
        lambda call: memory_create(user=call.user, **call.data),
        body=s.MemoryInput,
        output=s.MemoryOutput,
        status=201,
        operation_id="users_me_memories_create",
        summary="Remember something about the caller (a manual user-level memory)",
    )


class ProjectMemoriesView(APIView):
    get = endpoint(
        lambda call: PROJECT_MEMORIES.bind(
            user_id=call.user.pk, project_id=call.project.pk, **call.data
        ),
        access=project_access(READ),
        query=s.MemoryFilterInput,
        output=s.MemoryOutput,
        page=True,
        operation_id="projects_memories_list",
        summary="A project's memories (manual and auto, active and superseded)",
    )
    post = endpoint(
        lambda call: memory_create(user=call.user, project=call.project, **call.data),
        access=project_access(CREATE_TASK),
        body=s.MemoryInput,
        output=s.MemoryOutput,
        status=201,
        operation_id="projects_memories_create",
        summary="Remember something about a project (create_task)",
    )


def _memory_update(call: Call):
    memory = call.memory
    with transaction.atomic():  # the content and the citations, or neither
        if "content" in call.data:
            memory = memory_update(user=call.user, memory=memory, content=call.data["content"])
        if "citations" in call.data:
            memory = memory_citations_set(
                user=call.user, memory=memory, citations=call.data["citations"]
            )
    return memory


class MemoryDetailView(APIView):
    get = endpoint(
        lambda call: call.memory,
        access=memory_access(memory_get_for_read),
        output=s.MemoryOutput,
        operation_id="memories_retrieve",
        summary="One memory, with its usage, flags and status (its user, or project members)",
    )
    patch = endpoint(
        _memory_update,
        access=memory_access(memory_get_for_change),
        body=s.MemoryUpdateInput,
        output=s.MemoryOutput,
        operation_id="memories_update",
        summary="Edit a memory's content (its user, or create_task on its project)",
        description="The content is checked like a new memory's and flagged again; a changed "
        "content needs a new approval when it is still flagged. An auto memory edited by hand "
        "stays auto.",
    )
    delete = endpoint(
        lambda call: memory_delete(user=call.user, memory=call.memory),
        access=memory_access(memory_get_for_delete),
        operation_id="memories_delete",
        summary="Forget a memory (its user, or create_task on its project)",
    )


class MemoryApproveView(APIView):
    post = endpoint(
        lambda call: memory_approve(user=call.user, memory=call.memory),
        access=memory_access(memory_get_for_approve),
        body=s.NoInput,
        output=s.MemoryOutput,
        conflict="Neither flagged nor reported.",
        operation_id="memories_approve",
        summary="Approve a flagged or reported memory so that it is injected (project owner)",
        description="Releases a memory held for review: flagged as instruction-like (whoever "
        "wrote it) or reported. 409 when the memory is neither flagged nor reported. "
        "Approving an approved memory changes nothing.",
    )


class MemoryRestoreView(APIView):
    post = endpoint(
        lambda call: memory_restore(user=call.user, memory=call.memory),
        access=memory_access(memory_get_for_change),
        body=s.NoInput,
        output=s.MemoryOutput,
        conflict="Not archived, or the goal has another active auto memory.",
        operation_id="memories_restore",
        summary="Bring an archived memory back to active (its user, or create_task)",
        description="409 when the memory is not archived, or when its goal has another "
        "active auto memory now.",
    )


# --- Quota ----------------------------------------------------------------------------------


class MyQuotaView(APIView):
    get = endpoint(
        lambda call: quota_status_get(user_id=call.user.pk),
        output=s.QuotaOutput,
        operation_id="users_me_quota_retrieve",
        summary="The caller's monthly quota: limit, spend this UTC month, remaining percent",
    )


def _user_named(actor, username: str):
    """The user named `username` (the views are staff only: `IsAdminUser` answers 403 to
    anyone else before this)."""
    user = None
    if not text_problem(username):
        user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound("User not found.")
    return user


USER_FOR_STAFF = Access(
    "named_user",
    "username",
    _user_named,
    OpenApiParameter(
        "username", OpenApiTypes.STR, OpenApiParameter.PATH, description="A username."
    ),
    denies=True,
)


def _quota_set(call: Call):
    quota_set(actor=call.user, user=call.named_user, **call.data)
    return quota_status_get(user_id=call.named_user.pk)


class UserQuotaView(APIView):
    permission_classes = [IsAdminUser]

    get = endpoint(
        lambda call: quota_status_get(user_id=call.named_user.pk),
        access=USER_FOR_STAFF,
        output=s.QuotaOutput,
        operation_id="users_quota_retrieve",
        summary="A user's quota (staff only)",
    )
    put = endpoint(
        _quota_set,
        access=USER_FOR_STAFF,
        body=s.QuotaInput,
        output=s.QuotaOutput,
        operation_id="users_quota_set",
        summary="Set a user's monthly limit; null means unlimited (staff only)",
    )
    delete = endpoint(
        lambda call: quota_reset(actor=call.user, user=call.named_user),
        access=USER_FOR_STAFF,
        operation_id="users_quota_reset",
        summary="Drop a user's quota row: back to the default limit (staff only)",
    )


# --- API tokens -----------------------------------------------------------------------------


def _token_of(user, token_id: str):
    token = token_get_for_user(user=user, token_id=token_id)
    if token is None:
        raise NotFound("Token not found.")
    return token


TOKEN_OF_CALLER = Access(
    "token", "token_id", _token_of, id_parameter("token_id", "API token"), denies=False
)


def _token_create(call: Call) -> Response:
    minted = token_create(user=call.user, actor=call.user, **call.data)
    return Response({**s.TokenOutput(minted.token).data, "token": minted.key}, status=201)


class MyTokensView(APIView):
    get = endpoint(
        lambda call: token_list(user=call.user),
        output=s.TokenOutput,
        page=True,
        operation_id="users_me_tokens_list",
        summary="The caller's API tokens, newest first (never their keys)",
    )
    post = endpoint(
        _token_create,
        body=s.TokenCreateInput,
        output=s.TokenCreatedOutput,
        status=201,
        operation_id="users_me_tokens_create",
        summary="Mint an API token; its key is in this response only",
    )


class MyTokenDetailView(APIView):
    delete = endpoint(
        lambda call: token_revoke(token=call.token, actor=call.user),
        access=TOKEN_OF_CALLER,
        operation_id="users_me_tokens_revoke",
        summary="Revoke one of the caller's API tokens (revoking again changes nothing)",
    )
