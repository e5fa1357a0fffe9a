"""Host API views: validate input, call one service or selector, serialize the output.

Access is decided in controlplane.access (404 for non-members, 403 for a missing
permission); this module only says which permission each action needs.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
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
    project_get_for,
    task_get_for,
)
from controlplane.api import schema as _schema_extensions  # noqa: F401
from controlplane.api import serializers as s
from controlplane.api.common import (
    MEMORY_ID,
    PAGING,
    PROJECT_ID,
    TASK_ID,
    errors,
    id_parameter,
    paginated,
    validated,
)
from controlplane.api.pagination import paginated_response
from controlplane.limits import text_problem
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

# --- Projects -------------------------------------------------------------------------------


class ProjectListView(APIView):
    @extend_schema(
        operation_id="projects_list",
        summary="Projects the caller is a member of",
        parameters=PAGING,
        responses={200: paginated(s.ProjectOutput), **errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        return paginated_response(
            request, self, selectors.project_list(user=request.user), s.ProjectOutput
        )

    @extend_schema(
        operation_id="projects_create",
        summary="Create a project; the caller becomes its owner",
        request=s.ProjectCreateInput,
        responses={201: s.ProjectOutput, **errors(400, 401)},
    )
    def post(self, request: Request) -> Response:
        data = validated(s.ProjectCreateInput, request.data)
        project = project_create(user=request.user, **data)
        project = selectors.project_get(user=request.user, project=project)
        return Response(s.ProjectOutput(project).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[PROJECT_ID])
class ProjectDetailView(APIView):
    @extend_schema(
        operation_id="projects_retrieve",
        summary="One project",
        responses={200: s.ProjectOutput, **errors(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        project = selectors.project_get(user=request.user, project=project)
        return Response(s.ProjectOutput(project).data)


@extend_schema(parameters=[PROJECT_ID])
class ProjectMembersView(APIView):
    @extend_schema(
        operation_id="projects_members_list",
        summary="Members of a project and their roles",
        parameters=PAGING,
        responses={200: paginated(s.MembershipOutput), **errors(400, 401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        return paginated_response(
            request, self, selectors.membership_list(project=project), s.MembershipOutput
        )

    @extend_schema(
        operation_id="projects_members_set",
        summary="Add a member or change a member's role (owner only)",
        description="201 when the user was added, 200 when an existing role was changed. "
        "409 when the change would leave the project without an owner.",
        request=s.MembershipInput,
        responses={
            200: s.MembershipOutput,
            201: s.MembershipOutput,
            409: OpenApiResponse(description="The project's last owner cannot be demoted."),
            **errors(400, 401, 403, 404),
        },
    )
    def post(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=MANAGE_MEMBERS)
        data = validated(s.MembershipInput, request.data)
        membership, created = membership_set(actor=request.user, project=project, **data)
        return Response(
            s.MembershipOutput(membership).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema(
    parameters=[
        PROJECT_ID,
        OpenApiParameter("username", OpenApiTypes.STR, OpenApiParameter.PATH),
    ]
)
class ProjectMemberView(APIView):
    @extend_schema(
        operation_id="projects_members_remove",
        summary="Remove a member (owner only)",
        description="409 when it would leave the project without an owner. The removed "
        "user's queued tasks are refused when claimed, and their running tasks' memory "
        "keys stop working.",
        request=None,
        responses={
            204: None,
            409: OpenApiResponse(description="The project's last owner cannot be removed."),
            **errors(401, 403, 404),
        },
    )
    def delete(self, request: Request, project_id: str, username: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=MANAGE_MEMBERS)
        membership_remove(actor=request.user, project=project, username=username)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Tasks ----------------------------------------------------------------------------------


@extend_schema(parameters=[PROJECT_ID])
class ProjectTasksView(APIView):
    @extend_schema(
        operation_id="projects_tasks_list",
        summary="Tasks of a project, newest first",
        parameters=[*PAGING, s.TaskFilterInput],
        responses={200: paginated(s.TaskSummaryOutput), **errors(400, 401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        filters = validated(s.TaskFilterInput, request.query_params)
        tasks = selectors.task_list(user=request.user, project=project, **filters)
        return paginated_response(request, self, tasks, s.TaskSummaryOutput)

    @extend_schema(
        operation_id="projects_tasks_create",
        summary="Queue a task (create_task: owner or member)",
        request=s.TaskCreateInput,
        responses={201: s.TaskDetailOutput, **errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=CREATE_TASK)
        data = validated(s.TaskCreateInput, request.data)
        task = task_create(user=request.user, project=project, **data)
        return Response(
            s.TaskDetailOutput(task, context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


@extend_schema(parameters=[TASK_ID])
class TaskDetailView(APIView):
    @extend_schema(
        operation_id="tasks_retrieve",
        summary="One task, with its stored prompt and goal and its latest result",
        responses={200: s.TaskDetailOutput, **errors(401, 404)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=READ)
        return Response(s.TaskDetailOutput(task, context={"request": request}).data)


@extend_schema(parameters=[TASK_ID])
class TaskContinueView(APIView):
    @extend_schema(
        operation_id="tasks_continue",
        summary="Queue the next turn of a finished task (create_task)",
        request=s.TaskContinueInput,
        responses={
            200: s.TaskDetailOutput,
            409: OpenApiResponse(description="The task is not finished (queued or running)."),
            **errors(400, 401, 403, 404),
        },
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=CONTINUE_TASK)
        data = validated(s.TaskContinueInput, request.data)
        task = task_continue(user=request.user, task=task, **data)
        return Response(s.TaskDetailOutput(task, context={"request": request}).data)


@extend_schema(parameters=[TASK_ID])
class TaskFollowupsView(APIView):
    @extend_schema(
        operation_id="tasks_followups_list",
        summary="Messages delivered to a task",
        parameters=PAGING,
        responses={200: paginated(s.FollowupOutput), **errors(400, 401, 404)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=READ)
        return paginated_response(
            request, self, selectors.followup_list(task=task), s.FollowupOutput
        )

    @extend_schema(
        operation_id="tasks_followups_create",
        summary="Deliver a message to a task (create_task)",
        request=s.FollowupInput,
        responses={201: s.FollowupOutput, **errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=CREATE_TASK)
        data = validated(s.FollowupInput, request.data)
        followup = followup_create(user=request.user, task=task, **data)
        return Response(s.FollowupOutput(followup).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[TASK_ID])
class TaskRunsView(APIView):
    @extend_schema(
        operation_id="tasks_runs_list",
        summary="A task's runs in the usage ledger: turn, finish time, tokens, cost, model",
        description="One row per finished run (turn), oldest first. Refused, re-queued and "
        "lost runs have no usage and no row. The task's `cost_usd` is the sum of its rows.",
        parameters=PAGING,
        responses={200: paginated(s.TaskRunOutput), **errors(400, 401, 404)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get_for(user=request.user, task_id=task_id, action=READ)
        return paginated_response(
            request, self, selectors.usage_record_list_for_task(task=task), s.TaskRunOutput
        )


# --- Memories -------------------------------------------------------------------------------


class MyMemoriesView(APIView):
    @extend_schema(
        operation_id="users_me_memories_list",
        summary="The caller's user-level memories",
        parameters=[*PAGING, s.MemoryFilterInput],
        responses={200: paginated(s.MemoryOutput), **errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        filters = validated(s.MemoryFilterInput, request.query_params)
        memories = selectors.memory_list_for_user(user=request.user, **filters)
        return paginated_response(request, self, memories, s.MemoryOutput)

    @extend_schema(
        operation_id="users_me_memories_create",
        summary="Remember something about the caller (a manual user-level memory)",
        request=s.MemoryInput,
        responses={201: s.MemoryOutput, **errors(400, 401)},
    )
    def post(self, request: Request) -> Response:
        data = validated(s.MemoryInput, request.data)
        memory = memory_create(user=request.user, **data)
        return Response(s.MemoryOutput(memory).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[PROJECT_ID])
class ProjectMemoriesView(APIView):
    @extend_schema(
        operation_id="projects_memories_list",
        summary="A project's memories (manual and auto, active and superseded)",
        parameters=[*PAGING, s.MemoryFilterInput],
        responses={200: paginated(s.MemoryOutput), **errors(400, 401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        filters = validated(s.MemoryFilterInput, request.query_params)
        memories = selectors.memory_list_for_project(project=project, user=request.user, **filters)
        return paginated_response(request, self, memories, s.MemoryOutput)

    @extend_schema(
        operation_id="projects_memories_create",
        summary="Remember something about a project (create_task)",
        request=s.MemoryInput,
        responses={201: s.MemoryOutput, **errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=CREATE_TASK)
        data = validated(s.MemoryInput, request.data)
        memory = memory_create(user=request.user, project=project, **data)
        return Response(s.MemoryOutput(memory).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[MEMORY_ID])
class MemoryDetailView(APIView):
    @extend_schema(
        operation_id="memories_retrieve",
        summary="One memory, with its usage, flags and status (its user, or project members)",
        responses={200: s.MemoryOutput, **errors(401, 404)},
    )
    def get(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_read(user=request.user, memory_id=memory_id)
        return Response(s.MemoryOutput(memory).data)

    @extend_schema(
        operation_id="memories_update",
        summary="Edit a memory's content (its user, or create_task on its project)",
        description="The content is checked like a new memory's and flagged again; a changed "
        "content needs a new approval when it is still flagged. An auto memory edited by hand "
        "stays auto.",
        request=s.MemoryUpdateInput,
        responses={200: s.MemoryOutput, **errors(400, 401, 403, 404)},
    )
    def patch(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_change(user=request.user, memory_id=memory_id)
        data = validated(s.MemoryUpdateInput, request.data)
        with transaction.atomic():  # the content and the citations, or neither
            if "content" in data:
                memory = memory_update(user=request.user, memory=memory, content=data["content"])
            if "citations" in data:
                memory = memory_citations_set(
                    user=request.user, memory=memory, citations=data["citations"]
                )
        return Response(s.MemoryOutput(memory).data)

    @extend_schema(
        operation_id="memories_delete",
        summary="Forget a memory (its user, or create_task on its project)",
        responses={204: None, **errors(401, 403, 404)},
    )
    def delete(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_delete(user=request.user, memory_id=memory_id)
        memory_delete(user=request.user, memory=memory)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[MEMORY_ID])
class MemoryApproveView(APIView):
    @extend_schema(
        operation_id="memories_approve",
        summary="Approve a flagged or reported memory so that it is injected (project owner)",
        description="Releases a memory held for review: flagged as instruction-like (whoever "
        "wrote it) or reported. 409 when the memory is neither flagged nor reported. "
        "Approving an approved memory changes nothing.",
        request=None,
        responses={
            200: s.MemoryOutput,
            409: OpenApiResponse(description="Neither flagged nor reported."),
            **errors(401, 403, 404),
        },
    )
    def post(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_approve(user=request.user, memory_id=memory_id)
        validated(s.NoInput, request.data)
        memory = memory_approve(user=request.user, memory=memory)
        return Response(s.MemoryOutput(memory).data)


@extend_schema(parameters=[MEMORY_ID])
class MemoryRestoreView(APIView):
    @extend_schema(
        operation_id="memories_restore",
        summary="Bring an archived memory back to active (its user, or create_task)",
        description="409 when the memory is not archived, or when its goal has another "
        "active auto memory now.",
        request=None,
        responses={
            200: s.MemoryOutput,
            409: OpenApiResponse(
                description="Not archived, or the goal has another active auto memory."
            ),
            **errors(401, 403, 404),
        },
    )
    def post(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_change(user=request.user, memory_id=memory_id)
        validated(s.NoInput, request.data)
        memory = memory_restore(user=request.user, memory=memory)
        return Response(s.MemoryOutput(memory).data)


# --- Quota ----------------------------------------------------------------------------------


class MyQuotaView(APIView):
    @extend_schema(
        operation_id="users_me_quota_retrieve",
        summary="The caller's monthly quota: limit, spend this UTC month, remaining percent",
        responses={200: s.QuotaOutput, **errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(s.QuotaOutput(quota_status_get(user_id=request.user.pk)).data)


def _user_by_username(username: str):
    user = None
    if not text_problem(username):
        user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound("User not found.")
    return user


USERNAME_PARAMETER = OpenApiParameter(
    "username", OpenApiTypes.STR, OpenApiParameter.PATH, description="A username."
)


@extend_schema(parameters=[USERNAME_PARAMETER])
class UserQuotaView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        operation_id="users_quota_retrieve",
        summary="A user's quota (staff only)",
        responses={200: s.QuotaOutput, **errors(401, 403, 404)},
    )
    def get(self, request: Request, username: str) -> Response:
        user = _user_by_username(username)
        return Response(s.QuotaOutput(quota_status_get(user_id=user.pk)).data)

    @extend_schema(
        operation_id="users_quota_set",
        summary="Set a user's monthly limit; null means unlimited (staff only)",
        request=s.QuotaInput,
        responses={200: s.QuotaOutput, **errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, username: str) -> Response:
        user = _user_by_username(username)
        data = validated(s.QuotaInput, request.data)
        quota_set(actor=request.user, user=user, **data)
        return Response(s.QuotaOutput(quota_status_get(user_id=user.pk)).data)

    @extend_schema(
        operation_id="users_quota_reset",
        summary="Drop a user's quota row: back to the default limit (staff only)",
        responses={204: None, **errors(401, 403, 404)},
    )
    def delete(self, request: Request, username: str) -> Response:
        user = _user_by_username(username)
        quota_reset(actor=request.user, user=user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- API tokens -----------------------------------------------------------------------------

TOKEN_ID = id_parameter("token_id", "API token")


class MyTokensView(APIView):
    @extend_schema(
        operation_id="users_me_tokens_list",
        summary="The caller's API tokens, newest first (never their keys)",
        parameters=PAGING,
        responses={200: paginated(s.TokenOutput), **errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        return paginated_response(request, self, token_list(user=request.user), s.TokenOutput)

    @extend_schema(
        operation_id="users_me_tokens_create",
        summary="Mint an API token; its key is in this response only",
        request=s.TokenCreateInput,
        responses={201: s.TokenCreatedOutput, **errors(400, 401)},
    )
    def post(self, request: Request) -> Response:
        data = validated(s.TokenCreateInput, request.data)
        minted = token_create(user=request.user, actor=request.user, **data)
        body = {**s.TokenOutput(minted.token).data, "token": minted.key}
        return Response(body, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[TOKEN_ID])
class MyTokenDetailView(APIView):
    @extend_schema(
        operation_id="users_me_tokens_revoke",
        summary="Revoke one of the caller's API tokens (revoking again changes nothing)",
        responses={204: None, **errors(401, 404)},
    )
    def delete(self, request: Request, token_id: str) -> Response:
        token = token_get_for_user(user=request.user, token_id=token_id)
        if token is None:
            raise NotFound("Token not found.")
        token_revoke(token=token, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
