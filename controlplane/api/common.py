"""What every API view module shares: input validation and the schema's common parts."""

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from controlplane.api.pagination import PagingInput

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
