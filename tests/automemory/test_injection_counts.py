"""An injection's counts, written in one statement (a CTE on PostgreSQL, an upsert and its
triggers on SQLite): each memory's counter and last injection time (auto memory's
`MemoryState` row), and its day's count of tasks for the health page, the same on both
databases."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automemory.models import MemoryInjectionDay, MemoryState
from automemory.services.injector import injections_count

pytestmark = pytest.mark.django_db


def _days() -> dict:
    return {
        (row.memory_id, row.day.isoformat()): row.tasks for row in MemoryInjectionDay.objects.all()
    }


def test_counters_and_days_are_counted_together_in_one_statement(project, memory_factory):
    first, second, gone = (memory_factory(project=project) for _ in range(3))
    gone_id = gone.pk
    gone.delete()
    monday = datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    tuesday = monday + timedelta(microseconds=1)

    with CaptureQueriesContext(connection) as captured:
        injections_count(memory_ids=[first.pk, second.pk, first.pk, gone_id], now=monday)
    injections_count(memory_ids=[first.pk], now=monday)
    injections_count(memory_ids=[first.pk, second.pk], now=tuesday)
    injections_count(memory_ids=[], now=tuesday)

    assert len(captured.captured_queries) == 1, [q["sql"] for q in captured.captured_queries]
    counts = dict(MemoryState.objects.values_list("memory_id", "injection_count"))
    assert counts == {first.pk: 3, second.pk: 2}
    assert MemoryState.objects.get(memory=first).last_injected_at == tuesday
    assert _days() == {
        (first.pk, "2026-11-30"): 2,
        (second.pk, "2026-11-30"): 1,
        (first.pk, "2026-12-01"): 1,
        (second.pk, "2026-12-01"): 1,
    }


def test_an_edit_of_a_memory_counts_no_injection(project, memory_factory):
    memory = memory_factory(project=project, injection_count=4)
    memory.content = "Edited."
    memory.save()
    MemoryState.objects.filter(memory=memory).update(last_injected_at=datetime.now(UTC))
    MemoryState.objects.filter(memory=memory).update(cite_count=1)

    assert _days() == {}
