"""A memory's feedback list (`GET /memories/{id}/feedback`): its cites and reports newest
first, for whoever can read the memory and nobody else; a row written directly equals DRF's
generic output; a page costs the same statements whatever its size."""

from datetime import UTC, datetime

import pytest
from django.utils import timezone
from freezegun import freeze_time

from automemory.api.serializers import MemoryFeedbackSerializer
from automemory.models import FeedbackVia, MemoryFeedback
from automemory.selectors import memory_feedback_list
from automemory.services.feedback import memories_shown_record, memory_cite, memory_report
from controlplane.models import IdentityMemory, MemoryVisibility
from controlplane.services.memories import memory_approve
from tests.controlplane.helpers import assert_rows_are_drf_s_generic_output, page_read

TOKEN = "ghp_R7x2Kq9LmP4vT8wZ3nB6cY1dF5gH0jS2uE7i"


def feedback_url(memory) -> str:
    return f"/memories/{memory.pk}/feedback"


def cite(task, memory, note: str = "") -> None:
    memories_shown_record(task=task, memory_ids=[memory.pk])
    memory_cite(task=task, memory_ids=[memory.pk], note=note)


@pytest.fixture
def talked_about(project, alice, bob, vera, task_factory, memory_factory):
    """A project memory cited by two tasks, reported by a person (the report then closed by
    an owner's approval) and reported again, at odd times across a DST change."""
    memory = memory_factory(project=project)
    with freeze_time(datetime(2026, 3, 29, 1, 30, 0, 1, tzinfo=UTC)):
        cite(task_factory(project, bob), memory, note="used it for the deploy")
    with freeze_time(datetime(2026, 10, 25, 0, 59, 59, 999999, tzinfo=UTC)):
        memory_report(
            memory=memory,
            reason="outdated",
            note=f"we moved off Jenkins; token {TOKEN}",
            user=vera,
            via=FeedbackVia.PERSON,
        )
    with freeze_time(datetime(2026, 10, 25, 1, 0, 0, tzinfo=UTC)):
        memory_approve(user=alice, memory=IdentityMemory.objects.get(pk=memory.pk))
    with freeze_time(datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)):
        cite(task_factory(project, alice), memory)
    with freeze_time(datetime(2026, 11, 3, 9, 0, 0, tzinfo=UTC)):
        memory_report(memory=memory, reason="wrong", note="", user=bob, via=FeedbackVia.PERSON)
    return memory


def test_it_lists_cites_and_reports_newest_first(api_client_for, bob, talked_about):
    body = api_client_for(bob).get(feedback_url(talked_about)).json()

    assert body["count"] == 4
    report, later_cite, closed_report, first_cite = body["results"]
    assert (report["kind"], report["reason"], report["open"], report["task_id"]) == (
        "report",
        "wrong",
        True,
        None,
    )
    assert report["via"] == "person" and report["closed_at"] is None
    assert later_cite["kind"] == "cite" and later_cite["task_id"] is not None
    assert later_cite["open"] is False and later_cite["reason"] == ""
    assert closed_report["open"] is False
    assert closed_report["closed_at"] == "2026-10-25T01:00:00Z"
    assert closed_report["created_at"] == "2026-10-25T00:59:59.999999Z"
    assert first_cite["note"] == "used it for the deploy"
    assert first_cite["created_at"] == "2026-03-29T01:30:00.000001Z"
    # Who reported is not shown, and the stored note is the redacted one.
    assert "user" not in report and "user_id" not in report
    assert TOKEN not in closed_report["note"]
    assert "Jenkins" in closed_report["note"]


def test_it_filters_by_kind_and_refuses_an_unknown_one(api_client_for, bob, talked_about):
    client = api_client_for(bob)

    reports = client.get(feedback_url(talked_about), {"kind": "report"}).json()
    cites = client.get(feedback_url(talked_about), {"kind": "cite"}).json()
    wrong = client.get(feedback_url(talked_about), {"kind": "like"})

    assert [row["kind"] for row in reports["results"]] == ["report", "report"]
    assert [row["kind"] for row in cites["results"]] == ["cite", "cite"]
    assert wrong.status_code == 400 and "kind" in wrong.json()


def test_a_non_member_and_an_anonymous_caller_do_not_see_it(
    api_client_for, user_factory, client, talked_about
):
    stranger = user_factory("stranger")

    assert api_client_for(stranger).get(feedback_url(talked_about)).status_code == 404
    assert client.get(feedback_url(talked_about)).status_code == 401
    assert api_client_for(stranger).get("/memories/999999999/feedback").status_code == 404
    assert api_client_for(stranger).get("/memories/not-a-number/feedback").status_code == 404


def test_another_user_s_own_memory_is_not_there(api_client_for, alice, bob, memory_factory):
    """A user-level memory is its user's alone: another user (a member of every project they
    share) gets 404, as for a memory that does not exist."""
    private = memory_factory(user=alice, content="Alice prefers tabs.")
    IdentityMemory.objects.filter(pk=private.pk).update(created_by=alice)

    assert api_client_for(bob).get(feedback_url(private)).status_code == 404
    assert api_client_for(alice).get(feedback_url(private)).json()["count"] == 0


def test_a_memory_held_for_its_author_is_not_there_for_another_member(
    api_client_for, project, alice, bob, memory_factory, task_factory
):
    memory = memory_factory(project=project, user=alice)
    IdentityMemory.objects.filter(pk=memory.pk).update(
        visibility=MemoryVisibility.AUTHOR, created_by=alice
    )
    cite(task_factory(project, alice), memory)

    assert api_client_for(bob).get(feedback_url(memory)).status_code == 404
    assert api_client_for(alice).get(feedback_url(memory)).json()["count"] == 1


def test_it_shows_only_the_memory_asked_for(
    api_client_for, project, bob, memory_factory, task_factory, talked_about
):
    other = memory_factory(project=project)
    cite(task_factory(project, bob), other)

    body = api_client_for(bob).get(feedback_url(other)).json()

    assert body["count"] == 1
    assert {row["id"] for row in body["results"]} == set(
        MemoryFeedback.objects.filter(memory=other).values_list("id", flat=True)
    )


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/St_Johns"])
def test_a_row_written_directly_is_drf_s_generic_output(talked_about, zone):
    rows = list(MemoryFeedbackSerializer.rows(memory_feedback_list(memory=talked_about)))
    assert len(rows) == 4
    with timezone.override(zone):
        assert_rows_are_drf_s_generic_output(
            MemoryFeedbackSerializer, rows, lambda row: MemoryFeedback.objects.get(pk=row["id"])
        )


@pytest.mark.parametrize("page_size", [1, 50, 200])
def test_a_page_is_the_same_statements_whatever_its_size(
    api_client_for, project, bob, memory_factory, task_factory, page_size
):
    """The token, the memory with the caller's role in its project, and the page: its rows
    and the list's total in one statement."""
    memory = memory_factory(project=project)
    for _ in range(60):
        cite(task_factory(project, bob), memory)
    client = api_client_for(bob)
    url = f"{feedback_url(memory)}?page_size={page_size}"
    body, statements = page_read(client, url)
    assert len(body["results"]) == min(page_size, 60)
    assert body["count"] == 60
    assert len(statements) == 3, "\n".join(s[:300] for s in statements)
