"""Helpers for the host API tests."""

import json

from django.contrib.auth import get_user_model

from controlplane.models import (
    AuditEvent,
    IdentityMemory,
    Membership,
    Project,
    Quota,
    Task,
    TaskFollowup,
)


def row_counts() -> dict[str, int]:
    """How many rows each host table holds: a request that was refused must not change them."""
    return {
        model.__name__: model.objects.count()
        for model in (
            get_user_model(),
            Project,
            Membership,
            Task,
            TaskFollowup,
            IdentityMemory,
            Quota,
            AuditEvent,
        )
    }


def post_raw(client, path: str, body: bytes | str, method: str = "post"):
    """Send `body` verbatim as application/json."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    return getattr(client, method)(path, data=body, content_type="application/json")


def post_json(client, path: str, payload, method: str = "post"):
    return getattr(client, method)(path, data=json.dumps(payload), content_type="application/json")
