"""The repository API: a project's repository (`/projects/{id}/repository`) and a task's
diff (`/tasks/{id}/diff`). Views validate, call one service or selector, serialize."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import selectors
from controlplane.access import MANAGE_REPOSITORY, READ, project_get_for, task_get_for
from controlplane.api.common import PROJECT_ID, TASK_ID, errors, validated
from controlplane.api.repository_serializers import RepositoryInput, RepositoryOutput
from controlplane.errors import NotFoundError
from controlplane.services.repositories import (
    KEEP,
    repository_delete,
    repository_get,
    repository_set,
)

DIFF_CONTENT_TYPE = "text/x-diff; charset=utf-8"


@extend_schema(parameters=[PROJECT_ID])
class ProjectRepositoryView(APIView):
    @extend_schema(
        operation_id="projects_repository_retrieve",
        summary="The project's repository: URL, default branch, whether a credential is set, "
        "what the latest fetch found (members)",
        responses={200: RepositoryOutput, **errors(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for(user=request.user, project_id=project_id, action=READ)
        return Response(RepositoryOutput(repository_get(project=project)).data)

    @extend_schema(
        operation_id="projects_repository_set",
        summary="Attach or change the project's repository (owner only)",
        description="201 when attached, 200 when changed. The credential is write-only: "
        "stored encrypted, never returned. Changing the URL drops a stored credential "
        "unless a new one is sent.",
        request=RepositoryInput,
        responses={200: RepositoryOutput, 201: RepositoryOutput, **errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, project_id: str) -> Response:
        project = project_get_for(
            user=request.user, project_id=project_id, action=MANAGE_REPOSITORY
        )
        data = validated(RepositoryInput, request.data)
        repository, created = repository_set(
            actor=request.user,
            project=project,
            url=data["url"],
            default_branch=data["default_branch"],
            credential=data.get("credential", KEEP),
        )
        return Response(
            RepositoryOutput(repository).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        operation_id="projects_repository_delete",
        summary="Detach the project's repository and its credential (owner only)",
        responses={204: None, **errors(401, 403, 404)},
    )
    def delete(self, request: Request, project_id: str) -> Response:
        project = project_get_for(
            user=request.user, project_id=project_id, action=MANAGE_REPOSITORY
        )
        repository_delete(actor=request.user, project=project)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DiffRenderer(BaseRenderer):
    """Lets `Accept: text/x-diff` through content negotiation; the diff itself is a plain
    response and every error is JSON."""

    media_type = "text/x-diff"
    format = "diff"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return JSONRenderer().render(data)


@extend_schema(parameters=[TASK_ID])
class TaskDiffView(APIView):
    renderer_classes = [JSONRenderer, DiffRenderer]

    def perform_content_negotiation(self, request, force=False):
        # Errors are JSON whatever the client accepts; the diff is returned as it is.
        return JSONRenderer(), JSONRenderer.media_type

    @extend_schema(
        operation_id="tasks_diff",
        summary="The unified diff of the task's branch against its base commit (members)",
        description="As the latest finished turn left it: empty before a turn changed "
        "anything. Cut at WORKER_TASK_DIFF_MAX_BYTES: then its last line says so and the "
        "`X-Diff-Truncated` header is `true`. 404 for a task without a repository.",
        responses={
            (200, "text/x-diff"): OpenApiResponse(
                response=OpenApiTypes.STR, description="A unified diff (git's format)."
            ),
            **errors(401, 404),
        },
    )
    def get(self, request: Request, task_id: str) -> HttpResponse:
        task = task_get_for(user=request.user, task_id=task_id, action=READ)
        if not task.branch:
            raise NotFoundError("This task has no repository, so no diff.")
        diff = selectors.task_diff_get(task=task)
        response = HttpResponse(diff.diff if diff else "", content_type=DIFF_CONTENT_TYPE)
        response["X-Diff-Truncated"] = "true" if diff and diff.truncated else "false"
        return response
