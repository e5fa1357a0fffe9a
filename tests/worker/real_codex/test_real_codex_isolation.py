"""A hostile model for the real `codex` CLI: it has the CLI's shell run the hijacked agent
(tests/worker/hostile_agent.py) inside the task's bubblewrap sandbox and codex's own
sandbox, then uses its memory tools through the relay. Nothing of the control plane is
reached; the memory tools answer; the task completes.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from controlplane.models import TaskStatus
from tests.worker.real_codex.responses_server import Reply, mcp_tool_call, message
from tests.worker.test_agent_isolation import HOSTILE, Targets, bwrap_or_skip
from worker.codex import CodexExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def shell_call(command: str, call_id: str) -> dict:
    """The CLI's shell tool (`exec_command`, codex 0.171.0)."""
    return {
        "type": "function_call",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": command}),
        "call_id": call_id,
    }


def output_of(request, call_id: str) -> str:
    for item in request.body.get("input", []):
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            output = item["output"]
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output)
            return str(output).split("Output:", 1)[-1].strip()
    raise AssertionError(f"no output for {call_id}")


def test_a_hostile_model_s_shell_reaches_nothing_and_its_memory_tools_work(
    codex_setup,
    settings,
    monkeypatch,
    tmp_path,
    live_server,
    project,
    alice,
    memory_factory,
    auto_memory_on,
    task_factory,
    worker_factory,
):
    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    settings.WORKER_MEMORY_TOOLS = True
    settings.WORKER_MEMORY_API_URL = live_server.url
    settings.WORKER_SANDBOX_READ_ONLY = [*settings.WORKER_SANDBOX_READ_ONLY, str(HOSTILE)]
    targets = Targets(tmp_path, tmp_path / "tasks")
    other_home = tmp_path / "tasks" / "task-999999" / "home" / ".codex"
    other_home.mkdir(parents=True)
    (other_home / "auth.json").write_text("{}")
    targets.paths += [str(codex_setup.home / "config.toml"), str(other_home / "auth.json")]
    for name in ("SECRET_KEY", "DATABASE_URL", "CACHE_URL"):
        monkeypatch.setenv(name, f"{name}-{targets.canary}")
    auto_memory_on(alice)
    memory = memory_factory(project=project, content="Deploys run from the release branch.")
    probe = shlex.join(
        [sys.executable, "-I", str(HOSTILE), targets.orders(f"{live_server.url}/memories/1")]
    )
    codex_setup.server.script(
        Reply(items=(shell_call(probe, "p1"),)),
        Reply(items=(mcp_tool_call("memory", "memory_search", {"query": "deploys"}, "m1"),)),
        Reply(items=(message("Looked around."),)),
    )
    task = task_factory(project, alice, prompt="Tidy the build")

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    requests = codex_setup.server.model_requests()
    report = json.loads(output_of(requests[1], "p1"))
    assert not report["canary_in_env"]
    assert not {"SECRET_KEY", "DATABASE_URL", "CACHE_URL"} & set(report["env_names"])
    assert report["proc_environ_hits"] == []
    assert report["readable"] == dict.fromkeys(targets.paths, False)
    assert report["sqlite_opened"] == []
    assert report["postgres"].startswith("refused")
    assert all(result.startswith("refused") for result in report["services"].values())
    assert not any("200" in result for result in report["proxied"].values())
    assert report.get("approve_status") != 200
    found = json.loads(output_of(requests[2], "m1"))
    assert [m["id"] for m in found["memories"]] == [memory.pk]
    assert "Deploys run from the release branch." not in json.dumps(report)
