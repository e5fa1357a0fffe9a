"""What every API view module shares: input validation, the schema's common parts, and
`endpoint`, which states an endpoint's access rule, input and output once."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane import access
from controlplane.api.pagination import PagingInput, paginated_response

ERRORS = {
    400: OpenApiResponse(description="Invalid input: `{field: [messages]}`; nothing is saved."),
    401: OpenApiResponse(description="Not authenticated."),
    403: OpenApiResponse(description="Authenticated, but the role does not allow it."),
    404: OpenApiResponse(description="No such object, or not visible to the caller."),
    409: OpenApiResponse(description="The object's state forbids it now: `{detail}`."),
}


def errors(*codes: int) -> dict:
    """The schema's error responses for these status codes."""
    return {code: ERRORS[code] for code in codes}


def id_parameter(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, OpenApiTypes.INT, OpenApiParameter.PATH, description=f"{what} id."
    )


# Query parameters of every list; a bad value is a 400 (controlplane.api.pagination).
PAGING = [PagingInput]
PROJECT_ID = id_parameter("project_id", "Project")
TASK_ID = id_parameter("task_id", "Task")
MEMORY_ID = id_parameter("memory_id", "Memory")

_PAGE_SERIALIZERS: dict[str, type[serializers.Serializer]] = {}


def paginated(serializer_class) -> type[serializers.Serializer]:
    """The schema of a page of `serializer_class`: `{count, next, previous, results}`."""
    base = serializer_class.__name__.removesuffix("Output").removesuffix("Serializer")
    name = f"Paginated{base}List"
    if name not in _PAGE_SERIALIZERS:
        _PAGE_SERIALIZERS[name] = type(
            name,
            (serializers.Serializer,),
            {
                "count": serializers.IntegerField(),
                "next": serializers.URLField(allow_null=True),
                "previous": serializers.URLField(allow_null=True),
                "results": serializer_class(many=True),
            },
        )
    return _PAGE_SERIALIZERS[name]


# Refuses body keys the serializer does not know (read-only ones are tolerated); the schema
# says so with `additionalProperties: false` (controlplane.api.schema). A comment, not a
# docstring: the schema would show a docstring as each input's description.
class RejectUnknownFieldsMixin:
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        known = set(self.fields)
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)


def validated(serializer_class, data) -> dict:
    """`data` validated by `serializer_class`; a DRF ValidationError (400) otherwise.

    Query parameters are validated as a plain dict, so an empty `?status=` is a bad value
    rather than an absent one.
    """
    if isinstance(data, QueryDict):
        data = data.dict()
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- Endpoints ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """How an endpoint finds the object its path names, and whether the caller may act on it:
    `find(user, value)` returns it, or raises NotFound (404) or, when `denies`, also
    PermissionDenied (403). The object is the call's attribute `name`."""

    name: str
    path: str
    find: Callable[[Any, str], Any]
    parameter: OpenApiParameter
    denies: bool


def _by_role(name: str, get_for: Callable[..., Any], action: str) -> Access:
    """The object `<name>_id` names, by `get_for` (`controlplane.access.<name>_get_for`), on
    whose project the caller's role allows `action`."""
    path = f"{name}_id"
    return Access(
        name,
        path,
        lambda user, value: get_for(user=user, action=action, **{path: value}),
        id_parameter(path, name.capitalize()),
        denies=action != access.READ,
    )


def project_access(action: str) -> Access:
    """A project of the caller's, on which their role allows `action`."""
    return _by_role("project", access.project_get_for, action)


def task_access(action: str) -> Access:
    """A task of one of the caller's projects, on which their role allows `action`."""
    return _by_role("task", access.task_get_for, action)


def memory_access(get_for: Callable[..., Any]) -> Access:
    """A memory the caller may act on, by one of `controlplane.access.memory_get_for_*`."""
    return Access(
        "memory",
        "memory_id",
        lambda user, value: get_for(user=user, memory_id=value),
        MEMORY_ID,
        denies=get_for is not access.memory_get_for_read,
    )


class Call:
    """What an endpoint's `run` receives: the request, its user, the validated input `data`,
    the path's other values (`path`) and the object its access rule found (by its name)."""

    def __init__(self, request: Request, data: dict, path: dict, found: dict) -> None:
        self.request = request
        self.user = request.user
        self.data = data
        self.path = path
        self.__dict__.update(found)


def endpoint(
    run: Callable[[Call], Any],
    *,
    access: Access | None = None,
    body=None,
    query=None,
    output=None,
    page: bool = False,
    status: int | tuple[int, ...] | None = None,
    conflict: str | bool = False,
    responses: dict | None = None,
    parameters: list | None = None,
    **schema,
) -> Callable:
    """A view method that finds the path's object (`access`), validates the request's body
    (`body`) or query (`query`), calls `run` and answers with its result: serialized by
    `output` (a page of it with `page`), with `status` (200); nothing (204) without `output`; or
    the Response `run` returned, for an answer that depends on the outcome. The schema comes
    from the same statement: the path parameter, the input, the output and the errors the
    endpoint can answer (400 for input, 401, 403 for a rule that may deny, 404 for a path
    object, 409 for a `conflict`: its description, or `True` for the common one).
    `responses`, `parameters` and the rest of `schema` add to the schema."""
    if status is None:
        status = 200 if output is not None else 204
    statuses = status if isinstance(status, tuple) else (status,)
    answer = paginated(output) if page else output
    codes = {401}
    if body or query or page:
        codes.add(400)
    if access is not None:
        codes.add(404)
    if access is not None and access.denies:
        codes.add(403)
    if conflict is True:
        codes.add(409)
    described = {409: OpenApiResponse(description=conflict)} if isinstance(conflict, str) else {}
    params = [
        *([access.parameter] if access else []),
        *(parameters or []),
        *([query] if query else []),
        *(PAGING if page else []),
    ]

    @extend_schema(
        request=body,
        responses={
            **{code: answer for code in statuses},
            **described,
            **(responses or {}),
            **errors(*sorted(codes)),
        },
        parameters=params or None,
        **schema,
    )
    def method(view, request: Request, **path) -> Response:
        found = {}
        if access is not None:
            found[access.name] = access.find(request.user, path.pop(access.path))
        data = {}
        if body is not None:
            data = validated(body, request.data)
        elif query is not None:
            data = validated(query, request.query_params)
        result = run(Call(request, data, path, found))
        if isinstance(result, Response):
            return result
        if output is None:
            return Response(status=204)
        if page:
            return paginated_response(request, view, result, output)
        return Response(output(result, context={"request": request}).data, status=statuses[0])

    return method
