"""Timestamps read from PostgreSQL through psycopg's compiled loader are the values Django's own
loader gives: the same instant, the same tzinfo object, on every new connection and cursor."""

from datetime import UTC, datetime

import pytest
from django.db import connection, connections
from django.db.backends.postgresql.psycopg_any import BaseTzLoader, register_tzloader
from django.utils import timezone
from psycopg.pq import Format

from controlplane.models import Task
from controlplane.postgres_timestamps import TIMESTAMPTZ_OID, compiled_loader_class

# New connections are opened and closed: outside a test transaction.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TEXTS = [
    "2026-12-01 20:53:55.123456+00",
    "2026-12-01 20:53:55.1+00",
    "2026-12-01 20:53:55+00",
    "2026-02-28 23:59:59.999999+00",
    "2024-02-29 00:00:00+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "1969-07-20 20:17:40+05:30",
]


def _read(texts: list[str]) -> list[datetime]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("%s::timestamptz" for _ in texts), [*texts])
        return list(cursor.fetchone())


def _loader():
    return connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)


def test_psycopg_has_a_compiled_loader_here():
    # Without one the swap is skipped and nothing here would be measured: CI installs
    # psycopg[binary], so this must hold.
    assert compiled_loader_class() is not None


def test_every_new_connection_reads_timestamps_through_the_compiled_loader():
    connections.close_all()
    connection.ensure_connection()

    assert _loader().__name__ == "CompiledTzLoader"
    assert _loader().timezone is connection.timezone


def test_the_values_equal_django_s_own_loader_s():
    ours = _read(TEXTS)
    register_tzloader(connection.timezone, connection.connection)
    assert issubclass(_loader(), BaseTzLoader)
    try:
        django_s = _read(TEXTS)
    finally:
        connections.close_all()

    assert ours == django_s
    assert [value.tzinfo for value in ours] == [value.tzinfo for value in django_s]
    assert all(value.tzinfo is UTC for value in ours)
    assert ours[0] == datetime(2026, 12, 1, 20, 53, 55, 123456, tzinfo=UTC)
    assert ours[-1] == datetime(1969, 7, 20, 14, 47, 40, tzinfo=UTC)


def test_the_orm_reads_what_it_wrote(project, alice):
    moment = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    task = Task.objects.create(project=project, user=alice, prompt="p", queued_at=moment)

    read = Task.objects.get(pk=task.pk)

    assert read.queued_at == moment and read.queued_at.tzinfo is UTC
    assert timezone.is_aware(read.created_at)
