"""External context as the real Codex CLI reports it: the memory sweep reads the events the
`codex` executor stored from the CLI's own `mcp_tool_call` and `web_search` items."""

from __future__ import annotations

from automemory.models import AutoMemoryLog, AutoMemorySettings
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import AuditEvent, IdentityMemory, MemorySource, MemoryStatus, TaskStatus
from tests.worker.real_codex.responses_server import (
    Reply,
    mcp_tool_call,
    message,
    web_search_call,
)
from worker.codex import CodexExecutor

RESULT = "Sessions expire after 15 minutes of inactivity; the setting is SESSION_COOKIE_AGE."
MCP_THEN_SEARCH = (
    Reply(items=(mcp_tool_call("docs", "search", {"query": "session timeout"}, "call_1"),)),
    Reply(items=(web_search_call("django session expiry"), message(RESULT))),
)


def run_turn(worker, task, *replies, server, prompt=None):
    server.script(*replies)
    if prompt is not None:
        task.refresh_from_db()
        task.status, task.turn, task.continuation_prompt = (
            TaskStatus.QUEUED,
            task.turn + 1,
            prompt,
        )
        task.save()
    worker.run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason


def enable(user, **settings):
    AutoMemorySettings.objects.update_or_create(
        user=user, defaults={"generate_memories": True, "min_result_chars": 10, **settings}
    )


def test_a_run_that_called_an_mcp_tool_and_searched_the_web_is_not_remembered(
    codex_setup, project, alice, task_factory, worker_factory
):
    enable(alice)
    task = task_factory(project, alice, prompt="How long do sessions last?")
    run_turn(worker_factory(CodexExecutor()), task, *MCP_THEN_SEARCH, server=codex_setup.server)

    summary = process_auto_memories(user=alice, force=True)

    assert summary.skipped["external_context"] == 1
    log = AutoMemoryLog.objects.get(task=task)
    assert log.reason == "external_context"
    assert log.detail == "MCP call docs/search (and 1 more external call)"
    assert not IdentityMemory.objects.filter(source=MemorySource.AUTO).exists()


def test_an_internal_mcp_server_leaves_only_the_web_search(
    codex_setup, project, alice, task_factory, worker_factory
):
    enable(alice, internal_mcp_servers=["docs"])
    task = task_factory(project, alice, prompt="How long do sessions last?")
    run_turn(worker_factory(CodexExecutor()), task, *MCP_THEN_SEARCH, server=codex_setup.server)

    process_auto_memories(user=alice, force=True)

    assert AutoMemoryLog.objects.get(task=task).detail == "web search 'django session expiry'"


def test_a_memory_is_retracted_when_a_resumed_turn_searches_the_web(
    codex_setup, project, alice, task_factory, worker_factory
):
    enable(alice)
    worker = worker_factory(CodexExecutor())
    task = task_factory(project, alice, prompt="Explain the session settings")
    run_turn(worker, task, Reply(items=(message(RESULT),)), server=codex_setup.server)
    assert process_auto_memories(user=alice, force=True).extracted == 1
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)

    run_turn(
        worker,
        task,
        Reply(items=(web_search_call("django 5 session changes"), message("Nothing changed."))),
        server=codex_setup.server,
        prompt="Check whether Django 5 changed that",
    )
    summary = process_auto_memories(user=alice, force=True)

    assert summary.retracted == 1
    memory.refresh_from_db()
    assert (memory.status, memory.superseded_by_id) == (MemoryStatus.SUPERSEDED, None)
    log = AutoMemoryLog.objects.get(task=task)
    assert (log.outcome, log.reason) == ("skipped", "external_context")
    assert log.detail == f"web search 'django 5 session changes'; retracted memory {memory.pk}"
    assert AuditEvent.objects.filter(action="auto_memory_retracted").count() == 1
    assert process_auto_memories(user=alice, force=True).scanned == 0
