"""The task list's output path: a list's row written directly equals DRF's generic output of
the task field for field, in any time zone; a page costs the same statements whatever its
size."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from controlplane.api.serializers import TaskSummaryOutput
from controlplane.models import Task, TaskKind, TaskStatus
from controlplane.selectors import task_list
from tests.controlplane.helpers import assert_rows_are_drf_s_generic_output, page_read


@pytest.fixture
def varied_tasks(project, alice, bob, task_factory):
    """One of every shape the list shows: a goal, a blank goal over a multi-line prompt,
    a goal longer than a title, a whitespace-only goal, a continuation with a parent, costs
    with every decimal place, odd microseconds, unicode."""
    parent = task_factory(
        project, alice, goal="Make login work", completed=True, cost_usd=Decimal("0.125")
    )
    task_factory(
        project,
        bob,
        prompt='\n  Ünïcödé — and "quotes"  \nsecond line',
        goal="",
        kind=TaskKind.COORDINATOR,
        parent_task=parent,
        turn=3,
        cost_usd=Decimal("12.345678"),
        started_at=datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC),
    )
    task_factory(project, alice, goal="x" * 450 + "\nrest", status=TaskStatus.RUNNING)
    task_factory(project, alice, goal="   ", prompt="A prompt under a blank goal")
    task_factory(
        project,
        bob,
        prompt="Fails",
        status=TaskStatus.FAILED,
        finished_at=datetime(2026, 10, 25, 0, 59, 59, 999999, tzinfo=UTC),
        cost_usd=Decimal("0.000001"),
    )
    return project


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/St_Johns"])
def test_a_row_written_directly_is_drf_s_generic_output(varied_tasks, alice, zone):
    rows = list(TaskSummaryOutput.rows(task_list(user=alice, project=varied_tasks)))
    assert len(rows) == 5
    with timezone.override(zone):
        assert_rows_are_drf_s_generic_output(
            TaskSummaryOutput, rows, lambda row: Task.objects.get(pk=row["id"])
        )


def test_the_api_lists_them_as_before(api_client_for, alice, varied_tasks):
    body = api_client_for(alice).get(f"/projects/{varied_tasks.pk}/tasks").json()
    titles = [row["title"] for row in body["results"]]
    # Newest first; a whitespace-only goal is a goal (its title is blank, as before).
    assert titles == ["Fails", "", "x" * 200, 'Ünïcödé — and "quotes"  ', "Make login work"]
    by_title = {row["title"]: row for row in body["results"]}
    assert by_title["Make login work"]["cost_usd"] == 0.125
    assert by_title["Make login work"]["user"] == "alice"
    continued = by_title['Ünïcödé — and "quotes"  ']
    assert continued["user"] == "bob"
    assert continued["parent_task_id"] == by_title["Make login work"]["id"]
    assert continued["cost_usd"] == 12.345678
    assert continued["started_at"] == "2026-03-29T01:30:00.000001Z"
    assert by_title["Fails"]["finished_at"] == "2026-10-25T00:59:59.999999Z"


@pytest.mark.parametrize("page_size", [1, 50, 200])
def test_a_page_is_three_statements_whatever_its_size(
    api_client_for, alice, bob, project, task_factory, page_size
):
    """The token, the project with the caller's role, and the page: its rows, their users'
    names and the list's total in one statement."""
    for number in range(60):
        task_factory(project, bob if number % 2 else alice, goal=f"goal {number}")
    client = api_client_for(alice)
    url = f"/projects/{project.pk}/tasks?page_size={page_size}"
    body, statements = page_read(client, url)
    assert len(body["results"]) == min(page_size, 60)
    assert body["count"] == 60
    assert len(statements) == 3, statements
    assert {row["user"] for row in body["results"]} == (
        {"alice", "bob"} if page_size > 1 else {"bob"}
    )
