"""The extraction log's output path: a list's row written directly equals DRF's generic output
of the log entry field for field, in any time zone; a page costs the same statements whatever
its size."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from automemory.api.serializers import AutoMemoryLogSerializer
from automemory.models import AutoMemoryLog, Outcome, Reason
from automemory.selectors import auto_memory_log_list
from tests.controlplane.helpers import assert_rows_are_drf_s_generic_output, page_read

LOG = "/users/me/auto-memory-log"


def _entry(task, **fields) -> AutoMemoryLog:
    when = fields.pop("last_attempt_at", timezone.now() - timedelta(minutes=5))
    return AutoMemoryLog.objects.create(
        task=task,
        user=task.user,
        outcome=fields.pop("outcome", Outcome.SKIPPED),
        reason=fields.pop("reason", Reason.NOT_IDLE),
        first_attempt_at=fields.pop("first_attempt_at", when),
        last_attempt_at=when,
        **fields,
    )


@pytest.fixture
def varied_log(project, project_factory, alice, task_factory, memory_factory):
    """One of every shape the log shows: extracted with its memory, a skip, an error with a
    detail, forced and retried, in two projects, odd microseconds across a DST change."""
    other = project_factory(alice, "other")
    first = task_factory(project, alice, completed=True)
    memory = memory_factory(project=project)
    _entry(
        first,
        outcome=Outcome.EXTRACTED,
        reason=Reason.NEW,
        memory=memory,
        last_attempt_at=datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC),
    )
    _entry(task_factory(other, alice), reason=Reason.RESULT_TOO_SHORT)
    _entry(
        task_factory(project, alice),
        outcome=Outcome.ERROR,
        reason=Reason.ERROR,
        detail='Ünïcödé — "quotes"\nand a second line',
        forced=True,
        attempts=4,
        first_attempt_at=datetime(2026, 10, 25, 0, 59, 59, 999999, tzinfo=UTC),
        last_attempt_at=datetime(2026, 10, 25, 1, 0, 0, tzinfo=UTC),
    )
    return project


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/St_Johns"])
def test_a_row_written_directly_is_drf_s_generic_output(varied_log, alice, zone):
    rows = list(AutoMemoryLogSerializer.rows(auto_memory_log_list(user=alice)))
    assert len(rows) == 3
    with timezone.override(zone):
        assert_rows_are_drf_s_generic_output(
            AutoMemoryLogSerializer, rows, lambda row: AutoMemoryLog.objects.get(pk=row["task_id"])
        )


def test_the_api_lists_them_as_before(api_client_for, alice, varied_log):
    body = api_client_for(alice).get(LOG).json()
    assert body["count"] == 3
    skip, error, extracted = body["results"]  # newest attempt first
    assert skip["reason"] == "result_too_short" and skip["project_id"] != varied_log.pk
    assert error["outcome"] == "error" and error["forced"] is True and error["attempts"] == 4
    assert error["attempted_at"] == "2026-10-25T01:00:00Z"
    assert error["first_attempt_at"] == "2026-10-25T00:59:59.999999Z"
    assert error["project_id"] == varied_log.pk and error["memory_id"] is None
    assert extracted["attempted_at"] == "2026-03-29T01:30:00.000001Z"
    assert extracted["memory_id"] is not None and extracted["attempts"] == 1


@pytest.mark.parametrize("page_size", [1, 50, 200])
def test_a_page_is_two_statements_whatever_its_size(
    api_client_for, alice, bob, project, task_factory, page_size
):
    """The token, and the page: its rows, their tasks' projects and the log's total in one
    statement. Another user's entries are not in it."""
    for number in range(60):
        _entry(task_factory(project, alice), attempts=number + 1)
    _entry(task_factory(project, bob))
    client = api_client_for(alice)
    url = f"{LOG}?page_size={page_size}"
    body, statements = page_read(client, url)
    assert len(body["results"]) == min(page_size, 60)
    assert body["count"] == 60
    assert len(statements) == 2, statements
    assert {row["project_id"] for row in body["results"]} == {project.pk}
