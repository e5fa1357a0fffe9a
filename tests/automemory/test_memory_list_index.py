"""The console's list of a project's memories (every status, newest first) reads an index in
its order instead of sorting the project's whole history."""

import pytest
from django.db import connection

from automemory import selectors
from controlplane.models import IdentityMemory, MemoryStatus

INDEX = "memory_project_created_idx"


def page_plan(queryset) -> str:
    sql, params = queryset[:50].query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
def test_the_project_memories_page_reads_the_list_index_in_order(project, alice):
    for number, status in enumerate([MemoryStatus.ACTIVE, MemoryStatus.SUPERSEDED] * 20):
        IdentityMemory.objects.create(
            scope="project",
            project=project,
            content=f"memory {number}",
            source="manual",
            status=status,
            created_by=alice,
        )

    plan = page_plan(selectors.console_memory_list(project=project, user=alice))

    assert INDEX in plan, plan
    assert "TEMP B-TREE" not in plan.upper(), plan  # SQLite: no sort of the rows
    assert "Sort Key: identity_memories.created_at" not in plan, plan  # PostgreSQL
