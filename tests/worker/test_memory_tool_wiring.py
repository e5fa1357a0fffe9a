"""The worker gives each run its memory tools: a key minted by the claim (no statement of
its own), valid while the turn runs; the `command` executor's environment; the `codex`
executor's `-c mcp_servers.memory.*` overrides; the memory server's calls are internal."""

import json
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from automemory.models import AutoMemoryLog
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.memory_tools import ToolRefused, tool_search
from controlplane.models import Task, TaskEvent, TaskStatus
from controlplane.services.task_keys import TASK_KEY_ENV, task_key_authenticate, task_key_hash
from worker.executors import ExecutionRequest, ExecutionResult
from worker.executors.base import MEMORY_COMMAND_ENV, ExecutionControl
from worker.executors.codex import CodexExecutor
from worker.executors.command import CommandExecutor
from worker.services import task_claim_next


def test_the_claim_mints_a_key_the_run_holds_and_the_finish_revokes(
    project, alice, task_factory, worker_factory, spy_executor
):
    task = task_factory(project, alice)
    during = {}

    def action(request, control):
        during["task"] = task_key_authenticate(key=request.memory_key).pk
        during["search"] = tool_search(key=request.memory_key, query="anything", limit=1)

    spy_executor.action = action
    worker_factory(spy_executor).run_once()

    request = spy_executor.requests[0]
    assert request.memory_key.startswith("cpm_") and during["task"] == task.pk
    assert "memory_key" not in repr(request) and request.memory_key not in repr(request)
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED and task.memory_key_hash == ""
    with pytest.raises(ToolRefused):
        tool_search(key=request.memory_key, query="anything", limit=1)


def test_each_claim_mints_a_new_key_and_stores_only_its_hash(project, alice, task_factory):
    first = task_factory(project, alice)
    second = task_factory(project, alice)
    claims = [task_claim_next(worker_id="w1"), task_claim_next(worker_id="w1")]
    keys = [claim.memory_key for claim in claims]
    assert len(set(keys)) == 2
    for task, key in zip((first, second), keys, strict=True):
        stored = Task.objects.get(pk=task.pk).memory_key_hash
        assert stored == task_key_hash(key) and key not in stored


def test_a_failed_turn_revokes_its_key_too(project, alice, task_factory, worker_factory):
    class Failing:
        name = "failing"
        key = ""

        def execute(self, request, *, control):
            Failing.key = request.memory_key
            return ExecutionResult.failed("boom")

    task = task_factory(project, alice)
    worker_factory(Failing()).run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED and task.memory_key_hash == ""
    with pytest.raises(ToolRefused):
        tool_search(key=Failing.key, query="anything", limit=1)


def _request(**fields):
    values = {"task_id": 1, "project_id": 1, "user_id": 1, "prompt": "Fix the login bug"}
    return ExecutionRequest(**{**values, **fields})


def test_the_command_executor_gets_the_key_and_the_server_command(tmp_path, settings):
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os
            print(json.dumps({{k: os.environ.get(k) for k in
                              ({TASK_KEY_ENV!r}, {MEMORY_COMMAND_ENV!r})}}))
            """
        )
    )
    settings.WORKER_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    settings.WORKER_MEMORY_MCP_COMMAND = "/opt/python manage.py memory_mcp"
    result = CommandExecutor().execute(
        _request(memory_key="cpm_" + "k" * 43), control=ExecutionControl()
    )
    assert json.loads(result.result_text) == {
        TASK_KEY_ENV: "cpm_" + "k" * 43,
        MEMORY_COMMAND_ENV: "/opt/python manage.py memory_mcp",
    }
    settings.WORKER_MEMORY_TOOLS = False
    result = CommandExecutor().execute(
        _request(memory_key="cpm_" + "k" * 43), control=ExecutionControl()
    )
    assert json.loads(result.result_text) == {TASK_KEY_ENV: None, MEMORY_COMMAND_ENV: None}


def test_codex_gets_the_memory_server_by_name_never_the_key_on_its_command_line(tmp_path, settings):
    settings.WORKER_CODEX_BINARY = "codex"
    settings.WORKER_MEMORY_MCP_COMMAND = "/opt/py/bin/python /srv/app/manage.py memory_mcp"
    key = "cpm_" + "s" * 43
    env = {"PATH": "/bin", "DATABASE_URL": "postgres://u:pw@db/x", TASK_KEY_ENV: key}
    env[MEMORY_COMMAND_ENV] = settings.WORKER_MEMORY_MCP_COMMAND
    args = CodexExecutor().command_line(_request(memory_key=key), workdir=Path(tmp_path), env=env)
    overrides = [args[i + 1] for i, arg in enumerate(args) if arg == "-c"]
    assert overrides == [
        'mcp_servers.memory.command="/opt/py/bin/python"',
        'mcp_servers.memory.args=["/srv/app/manage.py", "memory_mcp"]',
        "mcp_servers.memory.env_vars="
        + json.dumps(sorted(["PATH", "DATABASE_URL", TASK_KEY_ENV, MEMORY_COMMAND_ENV])),
        'mcp_servers.memory.default_tools_approval_mode="approve"',
        "mcp_servers.memory.startup_timeout_sec=20",
        "mcp_optional_startup_grace_ms=20000",
    ]
    assert key not in " ".join(args) and "pw@" not in " ".join(args)
    # Without a key (memory tools off), no server.
    assert "-c" not in CodexExecutor().command_line(_request(), workdir=Path(tmp_path), env={})


def test_memory_server_calls_are_never_external_context(
    project, alice, task_factory, auto_memory_on
):
    auto_memory_on(alice, internal_mcp_servers=[])
    task = task_factory(project, alice, completed=True)
    TaskEvent.objects.create(
        task=task,
        turn=1,
        kind="mcp_tool_call",
        data={"type": "mcp_tool_call", "server": "memory", "tool": "memory_search"},
    )
    process_auto_memories(user=alice)
    assert AutoMemoryLog.objects.get(task=task).outcome == "extracted"
