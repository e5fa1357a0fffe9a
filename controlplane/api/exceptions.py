"""Turns domain errors and oversize bodies into API responses (DRF's exception handler hook).

- `DomainError` (raised by services) -> 400 `{field: [message]}` or `{"detail": ...}`;
  `ConflictError` -> 409.
- Django's `ValidationError` (a model or database rule) -> 400.
- A body larger than `DATA_UPLOAD_MAX_MEMORY_SIZE` -> 413 instead of Django's bare 400.
- JSON nested too deeply for the parser (Python's json raises RecursionError, which DRF's
  JSON parser does not catch) -> 400 like any other malformed JSON.
"""

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from controlplane.errors import DomainError


def api_exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(exc.as_body(), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        return Response(as_serializer_error(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": "Request body too large."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, RecursionError):
        exc = ParseError("JSON parse error - nested too deeply.")
    return exception_handler(exc, context)
