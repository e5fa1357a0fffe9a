"""What every API view module shares: input validation and the schema's common parts."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

ERRORS = {
    400: OpenApiResponse(description="Invalid input: `{field: [messages]}`; nothing is saved."),
    401: OpenApiResponse(description="Not authenticated."),
    403: OpenApiResponse(description="Authenticated, but the role does not allow it."),
    404: OpenApiResponse(description="No such object, or not visible to the caller."),
}


def errors(*codes: int) -> dict:
    """The schema's error responses for these status codes."""
    return {code: ERRORS[code] for code in codes}


def id_parameter(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        name, OpenApiTypes.INT, OpenApiParameter.PATH, description=f"{what} id."
    )


PAGING = [
    OpenApiParameter("page", OpenApiTypes.INT, description="Page number (from 1)."),
    OpenApiParameter("page_size", OpenApiTypes.INT, description="Rows per page (at most 200)."),
]
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


def validated(serializer_class, data) -> dict:
    """`data` validated by `serializer_class`; a DRF ValidationError (400) otherwise."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
