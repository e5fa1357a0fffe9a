"""Helpers for the host API tests."""

import json

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers

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


def assert_rows_are_drf_s_generic_output(output, rows: list[dict], instance_of) -> None:
    """Each list row, written directly by `output` (a `RowOutput`), equals DRF's generic
    output of its object (`instance_of(row)`), and so does the object through `output`:
    the same fields, order and value types; a page's rows in one pass equal them one at a
    time. In the current time zone."""
    serializer = output()
    for row in rows:
        instance = instance_of(row)
        generic = serializers.ModelSerializer.to_representation(serializer, instance)
        for direct in (output(row).data, output(instance).data):
            assert direct == generic
            assert list(direct) == list(generic)  # the same order too
            assert [type(value) for value in direct.values()] == [
                type(value) for value in generic.values()
            ]
    assert output(rows, many=True).data == [output(row).data for row in rows]


def page_read(client, url: str) -> tuple[dict, list[str]]:
    """A list page read twice (the token's first use is stamped once): the second read's
    body and the SQL of each statement it ran."""
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        body = client.get(url).json()
    return body, [query["sql"] for query in captured.captured_queries]
