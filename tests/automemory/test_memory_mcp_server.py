"""The `memory` MCP server (automemory/mcp_server.py) through the official SDK's client:
in-process on every database, and as `manage.py memory_mcp` over stdio on PostgreSQL."""

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from automemory.mcp_server import memory_server
from controlplane.models import TaskStatus
from controlplane.services.task_keys import TASK_KEY_ENV, task_key_new
from tests.automemory.processes import database_url

BASE_DIR = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running_task(task_factory, project, alice, memory_factory, auto_memory_on):
    auto_memory_on(alice, injection_ranking="relevant")
    memory = memory_factory(project=project, content="The staging database is db-stg-2.")
    minted = task_key_new()
    task = task_factory(project, alice, status=TaskStatus.RUNNING, memory_key_hash=minted.key_hash)
    return task, minted.key, memory


async def _talk(server, calls):
    async with Client(server) as client:
        tools = await client.list_tools()
        results = [await client.call_tool(name, arguments) for name, arguments in calls]
        return tools.tools, results


def _session(server, calls):
    """List the tools and make the calls, in a thread of its own (an event loop may already
    run in this one: the browser tests' Playwright leaves one)."""
    outcome = {}

    def talk():
        try:
            outcome["value"] = asyncio.run(_talk(server, calls))
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=talk)
    thread.start()
    thread.join(timeout=120)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _text(result) -> str:
    return "".join(part.text for part in result.content if getattr(part, "text", None))


def test_the_server_offers_exactly_the_four_tools(running_task):
    _, key, memory = running_task
    tools, results = _session(
        memory_server(key=key),
        [
            ("memory_search", {"query": "staging database", "limit": 3}),
            ("memory_cite", {"ids": [memory.pk], "note": "used it"}),
            ("memory_search", {"query": "x", "limit": 11}),
        ],
    )
    assert sorted(tool.name for tool in tools) == [
        "memory_cite",
        "memory_get",
        "memory_report",
        "memory_search",
    ]
    search = next(tool for tool in tools if tool.name == "memory_search")
    assert search.input_schema["properties"]["limit"]["maximum"] == 10
    report = next(tool for tool in tools if tool.name == "memory_report")
    assert report.input_schema["properties"]["reason"]["enum"] == ["wrong", "outdated", "unsafe"]
    found, cited, too_many = results
    assert not found.is_error
    assert [m["id"] for m in json.loads(_text(found))["memories"]] == [memory.pk]
    assert json.loads(_text(cited))["counted"] == [memory.pk]
    assert too_many.is_error


def test_a_wrong_key_gets_an_error_and_nothing(running_task):
    _, _, memory = running_task
    _, results = _session(
        memory_server(key="cpm_" + "A" * 43),
        [("memory_get", {"id": memory.pk})],
    )
    assert results[0].is_error
    assert "staging" not in _text(results[0])


@pytest.mark.postgres
def test_manage_py_memory_mcp_serves_over_stdio(running_task):
    _, key, memory = running_task
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(BASE_DIR / "manage.py"), "memory_mcp"],
        env={
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            TASK_KEY_ENV: key,
        },
        cwd=str(BASE_DIR),
    )
    _, results = _session(
        params,
        [
            ("memory_get", {"id": memory.pk}),
            ("memory_report", {"id": memory.pk, "reason": "outdated", "note": "moved"}),
        ],
    )
    assert json.loads(_text(results[0]))["memory"]["id"] == memory.pk
    assert json.loads(_text(results[1])) == {"reported": memory.pk, "held_for_review": True}
    memory.refresh_from_db()
    assert memory.report_count == 1 and memory.report_hold_at is not None
