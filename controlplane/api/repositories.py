"""The repository API: a project's repository (`/projects/{id}/repository`) and a task's
diff (`/tasks/{id}/diff`). Views validate, call one service or selector, serialize."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane import selectors
from controlplane.access import MANAGE_REPOSITORY, READ, task_get_for
from controlplane.api.common import TASK_ID, Call, endpoint, errors, project_access
from controlplane.api.repository_serializers import RepositoryInput, RepositoryOutput
from controlplane.errors import NotFoundError
from controlplane.services.repositories import (
    KEEP,
    repository_delete,
    repository_get,
    repository_set,
)

DIFF_CONTENT_TYPE = "text/x-diff; charset=utf-8"


def _repository_set(call: Call) -> Response:
    repository, created = repository_set(
        actor=call.user,
        project=call.project,
        url=call.data["url"],
        default_branch=call.data["default_branch"],
        credential=call.data.get("credential", KEEP),
    )
    return Response(RepositoryOutput(repository).data, status=201 if created else 200)


class ProjectRepositoryView(APIView):
    get = endpoint(
        lambda call: repository_get(project=call.project),
        access=project_access(READ),
        output=RepositoryOutput,
        operation_id="projects_repository_retrieve",
        summary="The project's repository: URL, default branch, whether a credential is set, "
        "what the latest fetch found (members)",
    )
    put = endpoint(
        _repository_set,
        access=project_access(MANAGE_REPOSITORY),
        body=RepositoryInput,
        output=RepositoryOutput,
        status=(200, 201),
        operation_id="projects_repository_set",
        summary="Attach or change the project's repository (owner only)",
        description="201 when attached, 200 when changed. The credential is write-only: "
        "stored encrypted, never returned. Changing the URL drops a stored credential "
        "unless a new one is sent.",
    )
    delete = endpoint(
        lambda call: repository_delete(actor=call.user, project=call.project),
        access=project_access(MANAGE_REPOSITORY),
        operation_id="projects_repository_delete",
        summary="Detach the project's repository and its credential (owner only)",
    )


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
