"""The memory tools from inside a real `codex` run: the CLI starts the `memory` relay
(automemory/memory_relay.py, as the `codex` executor configures it) and the model calls
`memory_search`, `memory_cite` and `memory_report` through it, under the turn's task key.

The relay holds no database credentials: it posts each call to the API, here a live test
server (`live_server`: committed rows, `transaction=True`), on every database.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from automemory.models import AutoMemoryLog, FeedbackKind, MemoryFeedback, MemoryState
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.injector import inject_memories as real_inject_memories
from controlplane.models import IdentityMemory, MonthlySpend, TaskEvent, TaskStatus, UsageRecord
from tests.conftest import memory_usage_of
from tests.worker.real_codex.responses_server import Reply, mcp_tool_call, message
from worker.codex import CodexExecutor

pytestmark = pytest.mark.django_db(transaction=True)
# What the worker's environment says about the database: nothing the agent's side may use
# (were the relay to read it, every call would fail).
UNUSABLE_DATABASE_URL = "postgres://canary:canary@127.0.0.1:9/not-the-test-database"

RESULT = "Sessions expire after 15 minutes; SESSION_COOKIE_AGE sets it.\nMemories used: #{cited}"
SECRET_NOTE = "moved to vault; the old password=hunter2hunter2 no longer works"


class KeyKeepingCodex(CodexExecutor):
    """The real executor; keeps each turn's key so the test can try it after the turn."""

    keys: list[str]

    def __init__(self) -> None:
        self.keys = []

    def execute(self, request, *, control):
        self.keys.append(request.memory_key)
        return super().execute(request, control=control)


def tool_status(url: str, key: str, tool: str, body: dict) -> int:
    """The API's status for one call of a tool with `key`, as the relay would make it."""
    request = urllib.request.Request(
        f"{url}/memory-tools/{tool}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def memory_setup(
    codex_setup,
    live_server,
    monkeypatch,
    settings,
    project,
    alice,
    memory_factory,
    auto_memory_on,
):
    settings.WORKER_MEMORY_TOOLS = True
    # The relay the CLI starts reaches the tools at the live server, with the key only.
    settings.WORKER_MEMORY_API_URL = live_server.url
    monkeypatch.setenv("DATABASE_URL", UNUSABLE_DATABASE_URL)
    monkeypatch.setattr("automemory.services.injector.inject_memories", real_inject_memories)
    auto_memory_on(alice, injection_ranking="relevant", min_result_chars=10)
    right = memory_factory(
        project=project, content="Session expiry: sessions expire after 15 minutes."
    )
    stale = memory_factory(
        project=project, content="Session expiry: sessions live in memcached for 1 hour."
    )
    return right, stale


def outputs_of(request) -> dict[str, str]:
    """The tool outputs the CLI sent back to the model, by call id: the server's text
    (the CLI puts a wall time line and `Output:` before it)."""
    found = {}
    for item in request.body.get("input", []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output if isinstance(part, dict))
            found[item["call_id"]] = str(output).split("Output:", 1)[-1].strip()
    return found


def answer_of(request, call_id: str):
    """The server's answer to one call, parsed."""
    return json.loads(outputs_of(request)[call_id])


def test_an_agent_searches_cites_and_reports_through_the_memory_server(
    codex_setup, memory_setup, live_server, project, alice, task_factory, worker_factory
):
    right, stale = memory_setup
    server = codex_setup.server
    server.script(
        Reply(
            items=(
                mcp_tool_call(
                    "memory", "memory_search", {"query": "session expiry", "limit": 5}, "c1"
                ),
            )
        ),
        Reply(items=(mcp_tool_call("memory", "memory_cite", {"ids": [right.pk]}, "c2"),)),
        Reply(
            items=(
                mcp_tool_call(
                    "memory",
                    "memory_report",
                    {"id": stale.pk, "reason": "outdated", "note": SECRET_NOTE},
                    "c3",
                ),
            )
        ),
        Reply(items=(message(RESULT.format(cited=right.pk)),)),
    )
    executor = KeyKeepingCodex()
    worker = worker_factory(executor)
    task = task_factory(project, alice, prompt="Fix the logout bug")

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    requests = server.model_requests()
    assert len(requests) == 4
    # The key was accepted during the run: each call answered by the API, though the
    # worker's DATABASE_URL names no database.
    found = answer_of(requests[1], "c1")
    assert {m["id"] for m in found["memories"]} == {right.pk, stale.pk}
    assert answer_of(requests[2], "c2")["counted"] == [right.pk]
    assert answer_of(requests[3], "c3") == {"reported": stale.pk, "held_for_review": True}
    # ... and refused once the turn ended.
    assert tool_status(live_server.url, executor.keys[0], "memory_search", {"query": "x"}) == 401

    # The citation (the tool's and the result line's: once) and the report are recorded.
    right.refresh_from_db()
    stale.refresh_from_db()
    assert memory_usage_of(right).cite_count == 1
    assert (
        memory_usage_of(stale).report_count,
        memory_usage_of(stale).report_hold_at is not None,
    ) == (1, True)
    report = MemoryFeedback.objects.get(memory=stale, kind=FeedbackKind.REPORT)
    assert (report.task_id, report.reason, report.via) == (task.pk, "outdated", "mcp")
    assert "hunter2hunter2" not in report.note and "[REDACTED]" in report.note

    # The CLI reported the calls, as `memory` calls; the external-context gate stays quiet.
    events = list(TaskEvent.objects.filter(task=task).order_by("id"))
    assert [(e.data["server"], e.data["tool"]) for e in events] == [
        ("memory", "memory_search"),
        ("memory", "memory_cite"),
        ("memory", "memory_report"),
    ]
    # Kept without the answers (memory text) and with the note's secret redacted.
    stored = json.dumps([e.data for e in events])
    assert "memcached" not in stored and "hunter2hunter2" not in stored
    process_auto_memories(user=alice, force=True)
    log = AutoMemoryLog.objects.get(task=task)
    assert (log.outcome, log.reason) != ("skipped", "external_context"), log.detail

    # Tool calls cost nothing: one ledger row, the run's, and the month adds up to it.
    rows = list(UsageRecord.objects.filter(user=alice))
    assert [(row.kind, row.task_id) for row in rows] == [("task_run", task.pk)]
    assert MonthlySpend.objects.get(user=alice).total_usd == rows[0].cost_usd

    # The next task's block has the cited memory and not the reported one.
    server.script(Reply(items=(message("Done."),)))
    task_factory(project, alice, prompt="Explain session expiry")
    worker.run_once()
    block = json.dumps(server.model_requests()[-1].body)
    assert f"#{right.pk} " in block
    assert f"#{stale.pk} " not in block and "memcached" not in block
    assert memory_usage_of(IdentityMemory.objects.get(pk=stale.pk)).report_hold_at is not None


def test_an_agent_cannot_reach_another_projects_memory(
    codex_setup,
    memory_setup,
    project,
    project_factory,
    alice,
    charlie,
    memory_factory,
    task_factory,
    worker_factory,
):
    """A prompt-injected agent told to read and report task B's project memory, with its own
    task's key: nothing comes back, nothing is held."""
    elsewhere = project_factory(charlie, "elsewhere", members=[alice])
    theirs = memory_factory(project=elsewhere, content="Payroll runs on db-pay-1.")
    codex_setup.server.script(
        Reply(items=(mcp_tool_call("memory", "memory_get", {"id": theirs.pk}, "g1"),)),
        Reply(
            items=(
                mcp_tool_call(
                    "memory", "memory_report", {"id": theirs.pk, "reason": "wrong"}, "r1"
                ),
            )
        ),
        Reply(items=(mcp_tool_call("memory", "memory_search", {"query": "payroll"}, "s1"),)),
        Reply(items=(message("Done."),)),
    )
    task = task_factory(project, alice, prompt="Unrelated work on the build")
    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    requests = codex_setup.server.model_requests()
    assert f"No memory #{theirs.pk} for this task" in outputs_of(requests[1])["g1"]
    assert f"No memory #{theirs.pk} was shown" in outputs_of(requests[2])["r1"]
    assert "db-pay-1" not in json.dumps([r.body for r in requests])
    theirs.refresh_from_db()
    assert (memory_usage_of(theirs).report_count, memory_usage_of(theirs).report_hold_at) == (
        0,
        None,
    )


def test_a_report_flood_from_one_run_holds_three_memories_at_most(
    codex_setup, memory_setup, project, alice, memory_factory, task_factory, worker_factory
):
    """An agent told to report everything it sees: the fourth report and later are refused
    (AUTOMEMORY_REPORTS_PER_TASK, 3 by default, in the API's settings)."""
    shown = list(memory_setup) + [
        memory_factory(project=project, content=f"Session expiry note {i}.") for i in range(3)
    ]
    replies = [
        Reply(
            items=(
                mcp_tool_call(
                    "memory", "memory_search", {"query": "session expiry", "limit": 10}, "s"
                ),
            )
        )
    ]
    replies += [
        Reply(
            items=(
                mcp_tool_call("memory", "memory_report", {"id": m.pk, "reason": "unsafe"}, f"r{i}"),
            )
        )
        for i, m in enumerate(shown)
    ]
    codex_setup.server.script(*replies, Reply(items=(message("Reported all."),)))
    task = task_factory(project, alice, prompt="Audit the session notes")
    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    requests = codex_setup.server.model_requests()
    answers = [outputs_of(requests[i + 2])[f"r{i}"] for i in range(len(shown))]
    assert [json.loads(a)["held_for_review"] for a in answers[:3]] == [True] * 3
    assert all("the most a task may report" in a for a in answers[3:]), answers
    assert MemoryState.objects.filter(report_hold_at__isnull=False).count() == 3
    assert MemoryFeedback.objects.filter(task=task, kind=FeedbackKind.REPORT).count() == 3


@pytest.fixture
def forwarder():
    """A port on every interface of the host passed through to another address: the memory
    tools served at the host's name, as a control plane on another host would be."""
    import socket
    import threading

    def forward(target: tuple[str, int]) -> int:
        listener = socket.create_server(("0.0.0.0", 0))

        def pipe(source, sink):
            with source, sink:
                while chunk := source.recv(65536):
                    sink.sendall(chunk)

        def serve():
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                upstream = socket.create_connection(target)
                threading.Thread(target=pipe, args=(client, upstream.dup()), daemon=True).start()
                threading.Thread(target=pipe, args=(upstream, client.dup()), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        listeners.append(listener)
        return listener.getsockname()[1]

    listeners: list = []
    yield forward
    for listener in listeners:
        listener.close()


def test_memory_tools_at_another_host_s_name_are_reached_through_the_sandbox_s_proxy(
    codex_setup,
    memory_setup,
    live_server,
    forwarder,
    settings,
    project,
    alice,
    task_factory,
    worker_factory,
):
    import socket
    from urllib.parse import urlsplit

    from tests.worker.test_agent_isolation import bwrap_or_skip

    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    right, stale = memory_setup
    served = urlsplit(live_server.url)
    port = forwarder((served.hostname, served.port))
    name = socket.gethostname()
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, name]
    # Not a loopback address: the agent's sandbox has no route and no DNS for it; only the
    # worker's egress proxy, which resolves it, gets there.
    settings.WORKER_MEMORY_API_URL = f"http://{name}:{port}"
    codex_setup.server.script(
        Reply(items=(mcp_tool_call("memory", "memory_search", {"query": "session"}, "c1"),)),
        Reply(items=(message("Done."),)),
    )
    task = task_factory(project, alice, prompt="Fix the logout bug")

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    found = answer_of(codex_setup.server.model_requests()[1], "c1")
    assert {m["id"] for m in found["memories"]} == {right.pk, stale.pk}
