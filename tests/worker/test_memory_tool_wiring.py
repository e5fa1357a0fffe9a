"""The worker gives each run its memory tools: a key minted by the claim (no statement of
its own), valid while the turn runs; the `command` executor's environment (the key, the
API's address, the relay's command line: no database settings); the `codex` executor's
`-c mcp_servers.memory.*` overrides; the memory server's calls are internal."""

import json
import shlex
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from automemory.models import AutoMemoryLog, TaskMemoryState
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.memory_tools import ToolRefused, tool_search
from automemory.services.task_keys import (
    TASK_KEY_ENV,
    TaskKeyInvalid,
    task_key_authenticate,
    task_key_hash,
)
from controlplane.models import Task, TaskEvent, TaskStatus
from worker.codex import CodexExecutor
from worker.executors import ExecutionRequest, ExecutionResult
from worker.executors.base import MEMORY_COMMAND_ENV, MEMORY_URL_ENV, ExecutionControl
from worker.executors.command import CommandExecutor
from worker.services import claim_key_store, task_claim_next


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
    assert task.status == TaskStatus.COMPLETED
    with pytest.raises(ToolRefused):
        tool_search(key=request.memory_key, query="anything", limit=1)


def test_each_claim_mints_a_new_key_and_stores_only_its_hash(
    project, alice, task_factory, worker_factory, spy_executor
):
    tasks = [task_factory(project, alice), task_factory(project, alice)]
    seen = {}

    def action(request, control):
        state = TaskMemoryState.objects.get(task_id=request.task_id)
        seen[request.task_id] = (request.memory_key, state.memory_key_hash)

    spy_executor.action = action
    worker_factory(spy_executor).run_once()

    assert sorted(seen) == [task.pk for task in tasks]
    assert len({key for key, _ in seen.values()}) == 2
    for key, stored in seen.values():
        assert stored == task_key_hash(key) and key not in stored


def test_a_key_of_an_earlier_claim_is_refused_once_the_task_is_claimed_again(
    project, alice, task_factory
):
    """The key is checked against the claim that minted it: a re-claimed turn (another
    claim time) refuses the old key even while the task runs."""
    task = task_factory(project, alice)
    claim = task_claim_next(worker_id="w1")
    claim_key_store(claim)
    assert task_key_authenticate(key=claim.memory_key).pk == task.pk

    Task.objects.filter(pk=task.pk).update(claimed_at=claim.task.claimed_at + timedelta(seconds=1))
    with pytest.raises(TaskKeyInvalid):
        task_key_authenticate(key=claim.memory_key)


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
    assert task.status == TaskStatus.FAILED
    with pytest.raises(ToolRefused):
        tool_search(key=Failing.key, query="anything", limit=1)


def _request(**fields):
    values = {"task_id": 1, "project_id": 1, "user_id": 1, "prompt": "Fix the login bug"}
    return ExecutionRequest(**{**values, **fields})


MEMORY_NAMES = (TASK_KEY_ENV, MEMORY_URL_ENV, MEMORY_COMMAND_ENV, "DATABASE_URL")


def test_the_default_memory_server_is_the_relay(settings):
    from controlplane import settings as production

    relay = Path(production.BASE_DIR) / "automemory" / "memory_relay.py"
    assert shlex.split(production.WORKER_MEMORY_MCP_COMMAND) == [sys.executable, str(relay)]
    assert "manage.py" not in production.WORKER_MEMORY_MCP_COMMAND


def test_the_command_executor_gets_the_key_the_address_and_the_relay(
    tmp_path, settings, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", "postgres://worker:pw@db/controlplane")
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os
            print(json.dumps({{k: os.environ.get(k) for k in {MEMORY_NAMES!r}}}))
            """
        )
    )
    settings.WORKER_COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    settings.WORKER_MEMORY_MCP_COMMAND = "/opt/python /srv/app/automemory/memory_relay.py"
    settings.WORKER_MEMORY_API_URL = "http://127.0.0.1:8123"
    result = CommandExecutor().execute(
        _request(memory_key="cpm_" + "k" * 43), control=ExecutionControl()
    )
    assert json.loads(result.result_text) == {
        TASK_KEY_ENV: "cpm_" + "k" * 43,
        MEMORY_URL_ENV: "http://127.0.0.1:8123",
        MEMORY_COMMAND_ENV: "/opt/python /srv/app/automemory/memory_relay.py",
        "DATABASE_URL": None,
    }
    settings.WORKER_MEMORY_TOOLS = False
    result = CommandExecutor().execute(
        _request(memory_key="cpm_" + "k" * 43), control=ExecutionControl()
    )
    assert json.loads(result.result_text) == dict.fromkeys(MEMORY_NAMES)


# An agent for the `command` executor that starts the memory server as docs/memory-tools.md
# shows (its command line from CONTROLPLANE_MEMORY_MCP_COMMAND, its own environment) and
# prints the answer of one search, and what its environment says of the database.
RELAYING_AGENT = """
import asyncio, json, os, shlex, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main():
    command, *args = shlex.split(os.environ["CONTROLPLANE_MEMORY_MCP_COMMAND"])
    server = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with Client(server) as memory:
        found = await memory.call_tool("memory_search", {"query": sys.stdin.read(), "limit": 3})
        print(json.dumps({
            "answer": json.loads(found.content[0].text),
            "database_url": os.environ.get("DATABASE_URL"),
        }))

asyncio.run(main())
"""


@pytest.mark.django_db(transaction=True)
def test_a_command_agent_starts_the_relay_and_searches_through_the_api(
    tmp_path,
    settings,
    monkeypatch,
    live_server,
    project,
    alice,
    task_factory,
    memory_factory,
    auto_memory_on,
    worker_factory,
):
    monkeypatch.setenv("DATABASE_URL", "postgres://canary:canary@127.0.0.1:9/nowhere")
    auto_memory_on(alice, injection_ranking="relevant")
    memory = memory_factory(project=project, content="Migrations run with make migrate.")
    script = tmp_path / "relaying_agent.py"
    script.write_text(RELAYING_AGENT)
    settings.WORKER_COMMAND = shlex.join([sys.executable, str(script)])
    settings.WORKER_MEMORY_API_URL = live_server.url
    task = task_factory(project, alice, prompt="migrations")

    worker_factory(CommandExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    printed = json.loads(task.result_text)
    assert [m["id"] for m in printed["answer"]["memories"]] == [memory.pk]
    assert printed["database_url"] is None


def test_codex_gets_the_memory_server_by_name_never_the_key_on_its_command_line(tmp_path, settings):
    settings.WORKER_CODEX_BINARY = "codex"
    settings.WORKER_MEMORY_MCP_COMMAND = "/opt/py/bin/python /srv/app/automemory/memory_relay.py"
    key = "cpm_" + "s" * 43
    env = {"PATH": "/bin", "DATABASE_URL": "postgres://u:pw@db/x", TASK_KEY_ENV: key}
    env[MEMORY_URL_ENV] = "http://127.0.0.1:8000"
    env[MEMORY_COMMAND_ENV] = settings.WORKER_MEMORY_MCP_COMMAND
    args = CodexExecutor().command_line(_request(memory_key=key), workdir=Path(tmp_path), env=env)
    overrides = [args[i + 1] for i, arg in enumerate(args) if arg == "-c"]
    assert overrides == [
        'mcp_servers.memory.command="/opt/py/bin/python"',
        'mcp_servers.memory.args=["/srv/app/automemory/memory_relay.py"]',
        # The relay inherits its key and the API's address, never the database's; and the
        # isolated sandbox's way to an address that is not on its loopback.
        "mcp_servers.memory.env_vars="
        + json.dumps(
            [*sorted(["PATH", TASK_KEY_ENV, MEMORY_URL_ENV]), "CONTROLPLANE_MEMORY_PROXY"]
        ),
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
