"""External context from the agent's own thread: MCP tool calls and web searches.

A task whose runs recorded an MCP call (to a server not listed as internal) or a web search
is skipped as `external_context`; a memory whose task gains such an event on a later turn is
retracted.
"""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemoryLog, AutoMemorySettings
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import (
    AuditEvent,
    MemoryStatus,
    TaskEvent,
    TaskStatus,
)
from tests.automemory.helpers import auto_memories, log_of

SETTINGS_URL = "/users/me/auto-memory-settings"
RUN_URL = "/users/me/auto-memory/run"


def mcp_call(server="docs", tool="search", **extra):
    return "mcp_tool_call", {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": server,
        "tool": tool,
        "arguments": {"q": "retry policy"},
        "result": {"content": [{"type": "text", "text": "x" * 500}]},
        "status": "completed",
        **extra,
    }


def web_search(query="django bulk_create update_conflicts"):
    return "web_search", {"id": "ws_1", "type": "web_search", "query": query}


def record(task, *events, turn=None):
    for kind, data in events:
        TaskEvent.objects.create(task=task, turn=turn or task.turn, kind=kind, data=data)


def later_turn(task, *events):
    """A continuation that runs, records events and completes again (bumping updated_at)."""
    task.status = TaskStatus.RUNNING
    task.turn += 1
    task.save()
    record(task, *events)
    task.status = TaskStatus.COMPLETED
    task.finished_at = timezone.now()
    task.save()


# --- The gate ----------------------------------------------------------------------------------


def test_it_skips_a_task_whose_run_called_an_mcp_tool(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True)
    record(task, mcp_call("docs", "search"))
    summary = process_auto_memories(user=alice)
    assert summary.skipped["external_context"] == 1
    log = log_of(task)
    assert (log.outcome, log.reason) == ("skipped", "external_context")
    assert log.detail == "MCP call docs/search"
    assert not auto_memories().exists()


def test_it_skips_a_task_whose_run_searched_the_web(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True)
    record(task, web_search("how to rotate postgres logs"))
    process_auto_memories()
    assert log_of(task).reason == "external_context"
    assert log_of(task).detail == "web search 'how to rotate postgres logs'"


def test_a_search_query_in_the_action_is_named_too(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True)
    record(task, ("web_search", {"type": "web_search", "action": {"query": "pytest xdist"}}))
    process_auto_memories(user=alice)
    assert log_of(task).detail == "web search 'pytest xdist'"


def test_the_detail_is_redacted_short_and_counts_the_rest(task_factory, project, alice, on):
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    task = task_factory(project, alice, completed=True)
    record(
        task,
        web_search(f"token {secret}"),
        web_search("word " * 200),
        mcp_call("github", "issues"),
    )
    process_auto_memories(user=alice)
    detail = log_of(task).detail
    assert secret not in detail
    assert detail.startswith("web search 'token [REDACTED]'")
    assert detail.endswith("(and 2 more external calls)")
    assert len(detail) < 150


def test_calls_to_internal_servers_are_not_external(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, internal_mcp_servers=["docs", "tickets"])
    task = task_factory(project, alice, completed=True)
    record(task, mcp_call("docs", "search"), mcp_call("tickets", "read"))
    summary = process_auto_memories(user=alice)
    assert summary.extracted == 1
    assert log_of(task).outcome == "extracted"


def test_an_internal_server_does_not_hide_an_external_call(
    task_factory, project, alice, auto_memory_on
):
    auto_memory_on(alice, internal_mcp_servers=["docs"])
    task = task_factory(project, alice, completed=True)
    record(task, mcp_call("docs", "search"), mcp_call("Docs", "search"))
    process_auto_memories(user=alice)
    assert log_of(task).reason == "external_context"
    assert log_of(task).detail == "MCP call Docs/search", "server names match exactly"


def test_internal_servers_are_per_user(task_factory, project, alice, bob, auto_memory_on):
    auto_memory_on(alice, internal_mcp_servers=["docs"])
    auto_memory_on(bob)
    mine = task_factory(project, alice, completed=True, prompt="mine")
    theirs = task_factory(project, bob, completed=True, prompt="theirs")
    record(mine, mcp_call("docs"))
    record(theirs, mcp_call("docs"))
    process_auto_memories()
    assert log_of(mine).outcome == "extracted"
    assert log_of(theirs).reason == "external_context"


def test_other_event_kinds_are_not_external_context(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True)
    record(task, ("command_execution", {"type": "command_execution", "command": "ls"}))
    process_auto_memories(user=alice)
    assert log_of(task).outcome == "extracted"


def test_events_are_ignored_when_the_setting_is_off(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, disable_on_external_context=False)
    task = task_factory(project, alice, completed=True)
    record(task, mcp_call(), web_search())
    process_auto_memories(user=alice)
    assert log_of(task).outcome == "extracted"


def test_a_forced_run_still_skips_external_context(task_factory, project, alice, on):
    task = task_factory(
        project, alice, completed=True, finished_ago=timedelta(0), result_text="tiny"
    )
    record(task, web_search())
    summary = process_auto_memories(user=alice, force=True)
    assert summary.skipped["external_context"] == 1
    assert log_of(task).forced is True
    assert not auto_memories().exists()


def test_looking_up_events_is_one_query_for_the_batch(task_factory, project, alice, on):
    def queries_for(count):
        AutoMemoryLog.objects.all().delete()
        for i in range(count):
            task = task_factory(project, alice, completed=True, prompt=f"goal {i}")
            record(task, mcp_call(f"server{i}"), web_search(f"query {i}"), mcp_call())
        with CaptureQueriesContext(connection) as ctx:
            summary = process_auto_memories(user=alice)
        assert summary.skipped["external_context"] == summary.scanned
        return len(ctx.captured_queries), summary.scanned

    small, scanned_small = queries_for(2)
    large, scanned_large = queries_for(25)
    assert (scanned_small, scanned_large) == (2, 27)
    assert large == small


def test_changing_the_internal_servers_rechecks_skipped_tasks(
    task_factory, project, alice, on, api_client_for
):
    task = task_factory(project, alice, completed=True)
    record(task, mcp_call("docs"))
    process_auto_memories()
    assert log_of(task).reason == "external_context"
    with freeze_time(timezone.now() + timedelta(minutes=5)):
        assert process_auto_memories().scanned == 0
        response = api_client_for(alice).patch(
            SETTINGS_URL, {"internal_mcp_servers": ["docs"]}, format="json"
        )
        assert response.status_code == 200, response.content
        assert process_auto_memories().extracted == 1


# --- Retraction --------------------------------------------------------------------------------


def test_a_memory_is_retracted_when_a_later_turn_searches_the_web(task_factory, project, alice, on):
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    assert process_auto_memories().extracted == 1
    memory = auto_memories().get()

    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, web_search("release notes"))
    with freeze_time(start + timedelta(minutes=40)):
        summary = process_auto_memories()

    assert summary.retracted == 1
    assert summary.extracted == 0
    memory.refresh_from_db()
    assert memory.status == MemoryStatus.SUPERSEDED
    assert memory.superseded_by_id is None
    log = log_of(task)
    assert (log.outcome, log.reason, log.memory_id) == ("skipped", "external_context", memory.pk)
    assert "web search 'release notes'" in log.detail
    assert f"retracted memory {memory.pk}" in log.detail
    assert log.retracted_at is not None
    event = AuditEvent.objects.get(action="auto_memory_retracted")
    assert event.target_id == str(memory.pk)
    assert event.data == {"task_id": task.pk, "memory_id": memory.pk, "restored_memory_id": None}
    assert memory.content not in str(event.data)


def test_a_retracted_task_is_never_extracted_again(
    task_factory, project, alice, on, api_client_for
):
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, mcp_call("search-engine", "query"))
    with freeze_time(start + timedelta(minutes=40)):
        process_auto_memories()
        assert log_of(task).retracted_at is not None
        # Nothing brings it back: another turn, a forced run, the setting off, the memory gone.
        later_turn(task)
        client = api_client_for(alice)
        client.patch(SETTINGS_URL, {"disable_on_external_context": False}, format="json")
        auto_memories().delete()
    with freeze_time(start + timedelta(hours=2)):
        assert process_auto_memories().scanned == 0
        assert client.post(RUN_URL, {"force": True}, format="json").json()["scanned"] == 0
        assert process_auto_memories(user=alice, force=True).extracted == 0
        assert process_auto_memories(force=True).extracted == 0
    assert not auto_memories().exists()
    assert log_of(task).reason == "external_context"
    assert log_of(task).recheck is False


def test_the_run_endpoint_retracts_and_counts_it(task_factory, project, alice, on, api_client_for):
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    client = api_client_for(alice)
    assert client.post(RUN_URL, {}, format="json").json()["extracted"] == 1
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, mcp_call("docs", "search"))
    with freeze_time(start + timedelta(minutes=40)):
        body = client.post(RUN_URL, {}, format="json").json()
    assert body["retracted"] == 1
    assert body["skipped"]["external_context"] == 0
    assert auto_memories().get().status == MemoryStatus.SUPERSEDED
    assert "MCP call docs/search" in log_of(task).detail


def test_retracting_the_active_memory_brings_back_the_one_it_displaced(
    task_factory, project, alice, on
):
    start = timezone.now()
    early = task_factory(
        project, alice, prompt="Tune the cache", completed=True, finished_ago=timedelta(hours=3)
    )
    late = task_factory(
        project, alice, prompt="tune the  cache", completed=True, finished_ago=timedelta(hours=2)
    )
    process_auto_memories()
    older = auto_memories().get(source_task=early)
    newer = auto_memories().get(source_task=late)
    assert (older.status, older.superseded_by_id) == (MemoryStatus.SUPERSEDED, newer.pk)

    with freeze_time(start + timedelta(minutes=10)):
        later_turn(late, web_search())
    with freeze_time(start + timedelta(minutes=40)):
        process_auto_memories()

    older.refresh_from_db()
    newer.refresh_from_db()
    assert (older.status, older.superseded_by_id) == (MemoryStatus.ACTIVE, None)
    assert (newer.status, newer.superseded_by_id) == (MemoryStatus.SUPERSEDED, None)
    event = AuditEvent.objects.get(action="auto_memory_retracted")
    assert event.data["restored_memory_id"] == older.pk


def test_retracting_a_memory_that_was_already_superseded_leaves_the_active_one(
    task_factory, project, alice, on
):
    start = timezone.now()
    early = task_factory(
        project, alice, prompt="Tune the cache", completed=True, finished_ago=timedelta(hours=3)
    )
    late = task_factory(
        project, alice, prompt="Tune the cache", completed=True, finished_ago=timedelta(hours=2)
    )
    process_auto_memories()
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(early, web_search())
    with freeze_time(start + timedelta(minutes=40)):
        assert process_auto_memories().retracted == 1
    assert auto_memories(status=MemoryStatus.ACTIVE).get().source_task_id == late.pk
    assert log_of(early).retracted_at is not None


def test_a_later_turn_without_external_context_leaves_the_memory(task_factory, project, alice, on):
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    before = log_of(task)
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, ("command_execution", {"type": "command_execution"}))
    with freeze_time(start + timedelta(minutes=40)):
        summary = process_auto_memories()
    assert (summary.scanned, summary.retracted) == (0, 0)
    assert auto_memories().get().status == MemoryStatus.ACTIVE
    after = log_of(task)
    assert (after.outcome, after.attempts, after.last_attempt_at) == (
        "extracted",
        before.attempts,
        before.last_attempt_at,
    )


def test_nothing_is_retracted_when_the_setting_is_off(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, disable_on_external_context=False)
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, web_search())
    with freeze_time(start + timedelta(minutes=40)):
        assert process_auto_memories().retracted == 0
    assert auto_memories().get().status == MemoryStatus.ACTIVE
    assert log_of(task).outcome == "extracted"


def test_a_later_call_to_an_internal_server_does_not_retract(
    task_factory, project, alice, auto_memory_on
):
    auto_memory_on(alice, internal_mcp_servers=["docs"])
    start = timezone.now()
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    with freeze_time(start + timedelta(minutes=10)):
        later_turn(task, mcp_call("docs"))
    with freeze_time(start + timedelta(minutes=40)):
        assert process_auto_memories().retracted == 0
    assert auto_memories().get().status == MemoryStatus.ACTIVE


# --- The setting -------------------------------------------------------------------------------


def test_the_setting_defaults_to_no_internal_servers(api_client_for, alice):
    assert api_client_for(alice).get(SETTINGS_URL).json()["internal_mcp_servers"] == []


def test_the_setting_is_saved_and_returned(api_client_for, alice):
    client = api_client_for(alice)
    response = client.put(SETTINGS_URL, {"internal_mcp_servers": ["docs", "jira-cloud"]}, "json")
    assert response.status_code == 200, response.content
    assert client.get(SETTINGS_URL).json()["internal_mcp_servers"] == ["docs", "jira-cloud"]
    assert AutoMemorySettings.objects.get(user=alice).internal_mcp_servers == [
        "docs",
        "jira-cloud",
    ]
    assert client.patch(SETTINGS_URL, {"internal_mcp_servers": []}, "json").status_code == 200
    assert client.get(SETTINGS_URL).json()["internal_mcp_servers"] == []


@pytest.mark.parametrize(
    "value",
    [
        "docs",
        None,
        5,
        {"docs": True},
        [1],
        [None],
        [["docs"]],
        [""],
        ["   "],
        [" docs"],
        ["d" * 101],
        ["do\ncs"],
        ["do\x1bcs"],
        ["a\x00b"],
        ["\ud800"],
        ["docs", "docs"],
        [f"server{i}" for i in range(51)],
    ],
)
def test_bad_server_lists_get_a_400_and_nothing_is_saved(api_client_for, alice, value):
    client = api_client_for(alice)
    # Sent as ASCII-escaped JSON, so that a lone surrogate reaches the server as a client sends it.
    body = json.dumps({"use_memories": True, "internal_mcp_servers": value})
    response = client.put(SETTINGS_URL, body, content_type="application/json")
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == ["internal_mcp_servers"]
    assert all(isinstance(message, str) and message for message in errors["internal_mcp_servers"])
    assert client.get(SETTINGS_URL).json()["use_memories"] is False
    assert not AutoMemorySettings.objects.exists()


def test_each_bad_item_gets_its_own_message(api_client_for, alice):
    response = api_client_for(alice).put(
        SETTINGS_URL, {"internal_mcp_servers": ["ok", "", "ok", 7]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["internal_mcp_servers"] == [
        "Item 1: may not be blank.",
        "Item 2: 'ok' is listed twice.",
        "Item 3: must be a string.",
    ]


def test_fifty_names_are_accepted(api_client_for, alice):
    names = [f"server-{i}" for i in range(50)]
    response = api_client_for(alice).put(SETTINGS_URL, {"internal_mcp_servers": names}, "json")
    assert response.status_code == 200
    assert response.json()["internal_mcp_servers"] == names


def test_the_schema_describes_the_setting_as_a_list_of_names(client, db):
    schema = client.get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    field = schema["components"]["schemas"]["AutoMemorySettings"]["properties"][
        "internal_mcp_servers"
    ]
    assert field["type"] == "array"
    assert field["maxItems"] == 50
    assert field["items"] == {"type": "string", "maxLength": 100}
    summary = schema["components"]["schemas"]["RunSummary"]
    assert "retracted" in summary["required"]


@pytest.fixture
def admin_client(client, user_factory):
    admin = user_factory("root", is_staff=True)
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    return client


def test_the_admin_shows_and_validates_the_setting(admin_client, alice):
    settings = AutoMemorySettings.objects.create(user=alice, internal_mcp_servers=["docs"])
    url = f"/admin/automemory/automemorysettings/{settings.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b"internal_mcp_servers" in page.content
    assert b"docs" in page.content
    form = {
        "user": alice.pk,
        "min_rate_limit_remaining_percent": 20,
        "idle_seconds": 900,
        "min_duration_seconds": 30,
        "min_result_chars": 200,
        "internal_mcp_servers": '["docs", "docs"]',
    }
    response = admin_client.post(url, form)
    assert response.status_code == 200, "the form is shown again with the error"
    assert b"listed twice" in response.content
    settings.refresh_from_db()
    assert settings.internal_mcp_servers == ["docs"]
