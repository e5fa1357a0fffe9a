import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from automemory.models import AutoMemoryLog
from automemory.services.extraction.log import SKIP_REASONS
from controlplane.models import IdentityMemory, Task


def test_run_auto_memory_prints_the_summary(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice)
    task_factory(project, alice, completed=True)
    out = StringIO()
    call_command("run_auto_memory", "--user", "alice", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["extracted"] == 1
    assert summary["skipped"]["not_idle"] == 0
    assert summary["forced"] is False


def test_run_auto_memory_force(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice)
    task_factory(project, alice, completed=True, result_text="short")
    out = StringIO()
    call_command("run_auto_memory", "--user", "alice", "--force", stdout=out)
    assert json.loads(out.getvalue())["extracted"] == 1


def test_run_auto_memory_refuses_an_unknown_user(db):
    with pytest.raises(CommandError, match="nobody"):
        call_command("run_auto_memory", "--user", "nobody")


RUN = "/users/me/auto-memory/run"


def test_the_run_endpoint_sweeps_only_the_callers_tasks(
    api_client_for, task_factory, project, alice, bob, auto_memory_on
):
    auto_memory_on(alice)
    auto_memory_on(bob)
    task_factory(project, alice, prompt="mine", completed=True)
    task_factory(project, bob, prompt="bob's", completed=True, result_text="tiny")
    response = api_client_for(alice).post(RUN, {}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["scanned"] == 1 and body["extracted"] == 1 and body["superseded"] == 0
    # Every gate's reason code, private_content included, with its count.
    assert set(body["skipped"]) == {str(reason) for reason in SKIP_REASONS}
    assert "private_content" in body["skipped"]
    assert not AutoMemoryLog.objects.filter(user=bob).exists()


def test_the_run_endpoint_with_force(api_client_for, task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice)
    task_factory(project, alice, completed=True, result_text="tiny")
    client = api_client_for(alice)
    assert client.post(RUN, {}, format="json").json()["skipped"]["result_too_short"] == 1
    body = client.post(RUN, {"force": True}, format="json").json()
    assert body["extracted"] == 1 and body["forced"] is True


@pytest.mark.parametrize("body", [{"force": "yes"}, {"force": 2}, {"forse": True}, [1]])
def test_the_run_endpoint_validates_its_body(api_client_for, alice, body):
    response = api_client_for(alice).post(RUN, body, format="json")
    assert response.status_code == 400


def test_the_run_endpoint_needs_a_user(api_client_for, db):
    assert api_client_for(None).post(RUN, {}, format="json").status_code in (401, 403)


LOG = "/users/me/auto-memory-log"


def test_the_log_shows_only_the_callers_tasks(
    api_client_for, task_factory, project, alice, bob, auto_memory_on
):
    auto_memory_on(alice)
    mine = task_factory(project, alice, prompt="mine", completed=True)
    task_factory(project, bob, prompt="bob's", completed=True)
    client = api_client_for(alice)
    client.post(RUN, {}, format="json")
    api_client_for(bob).post(RUN, {}, format="json")
    rows = client.get(LOG).json()["results"]
    assert [row["task_id"] for row in rows] == [mine.pk]
    row = rows[0]
    memory = IdentityMemory.objects.get(source_task=mine)
    assert row == {
        "task_id": mine.pk,
        "project_id": project.pk,
        "outcome": "extracted",
        "reason": "new",
        "memory_id": memory.pk,
        "forced": False,
        "attempts": 1,
        "detail": "",
        "attempted_at": row["attempted_at"],
        "first_attempt_at": row["first_attempt_at"],
    }


def test_the_log_filters(api_client_for, task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice)
    task_factory(project, alice, prompt="a", completed=True)
    task_factory(project, alice, prompt="b", completed=True, result_text="tiny")
    client = api_client_for(alice)
    client.post(RUN, {}, format="json")
    assert client.get(LOG + "?outcome=skipped").json()["count"] == 1
    assert client.get(LOG + "?reason=result_too_short").json()["count"] == 1
    assert client.get(LOG + "?reason=bogus").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_the_demo_shows_the_whole_loop(settings):
    out = StringIO()
    call_command("demo_auto_memory", stdout=out)
    text = out.getvalue()
    assert "extracted (new)" in text and "skipped (result_too_short)" in text
    assert "s3cr3t-Passw0rd" not in text
    last = Task.objects.order_by("-id").first()
    assert last.injected_memory_ids and "Past memories" in last.result_text
    again = StringIO()
    call_command("demo_auto_memory", stdout=again)
    assert "already ran" in again.getvalue()
    assert Task.objects.count() == 3
