"""The real `codex` CLI against a local fake Responses API server and a fake MCP server.

The CLI is pinned in `codex-version` (the Makefile installs that version from npm into
`.cache/codex-cli/<version>/`); CODEX_CLI_BINARY points the tests at another binary. Without
a binary the tests skip, except in CI (the CI environment variable set), where they fail.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.worker.real_codex.responses_server import ResponsesServer
from worker.egress import url_destination

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
CODEX_VERSION = (HERE / "codex-version").read_text().strip()
MCP_SERVER = HERE / "mcp_server.py"
MODEL = "test-model"
# USD per 1M tokens, every rate distinct so a wrongly priced count shows.
PRICES = {MODEL: {"input": "2", "cached_input": "0.5", "cache_write": "3", "output": "8"}}


def codex_binary() -> Path | None:
    override = os.environ.get("CODEX_CLI_BINARY")
    path = Path(override) if override else ROOT / ".cache/codex-cli" / CODEX_VERSION / "bin/codex"
    return path if path.is_file() and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def real_codex() -> Path:
    binary = codex_binary()
    if binary is None:
        reason = (
            f"the real codex CLI {CODEX_VERSION} is not installed: run `make codex-cli` "
            "(needs node and npm) or set CODEX_CLI_BINARY"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-CLI tests: {reason}", pytrace=False)
        pytest.skip(reason)
    return binary


@pytest.fixture
def model_server():
    with ResponsesServer() as server:
        yield server


@dataclass
class CodexSetup:
    home: Path
    mcp_log: Path
    server: ResponsesServer

    def mcp_calls(self) -> list[str]:
        return self.mcp_log.read_text().splitlines() if self.mcp_log.exists() else []


@pytest.fixture
def codex_setup(real_codex, model_server, tmp_path, settings, monkeypatch) -> CodexSetup:
    """A CODEX_HOME whose config sends the model to `model_server` and approves the MCP tools.

    This is the config a deployment needs too (docs/worker.md): a provider with `base_url`,
    `wire_api = "responses"` and the key's environment variable, and MCP approval.
    """
    home = tmp_path / "codex-home"
    home.mkdir()
    mcp_log = tmp_path / "mcp" / "calls.jsonl"
    mcp_log.parent.mkdir()
    (home / "config.toml").write_text(
        f"""
model = "{MODEL}"
model_provider = "fake"

[model_providers.fake]
name = "fake Responses API"
base_url = "{model_server.base_url}"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.docs]
command = "{sys.executable}"
args = ["{MCP_SERVER}"]
env = {{ FAKE_MCP_LOG = "{mcp_log}" }}
default_tools_approval_mode = "approve"
"""
    )
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("FAKE_MODEL_API_KEY", "sk-test-not-a-secret")
    settings.WORKER_CODEX_BINARY = str(real_codex)
    # What a deployment names too: the provider's key, its address (the agent's only way out
    # of its sandbox's network besides the memory tools), and the agent's own MCP server's
    # files.
    settings.WORKER_AGENT_ENV = ["FAKE_MODEL_API_KEY"]
    settings.WORKER_AGENT_EGRESS = [str(url_destination(model_server.base_url))]
    settings.WORKER_SANDBOX_READ_ONLY = [str(MCP_SERVER)]
    settings.WORKER_SANDBOX_WRITABLE = [str(mcp_log.parent)]
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    settings.WORKER_CODEX_SANDBOX = "read-only"
    settings.WORKER_CODEX_MODEL = MODEL
    settings.WORKER_CODEX_PRICES = PRICES
    settings.WORKER_CODEX_RESUME_USAGE = "cumulative"
    settings.WORKER_CODEX_TIMEOUT_SECONDS = 60
    # The memory tools' server (a Django process of its own) only where a test asks for it:
    # test_real_codex_memory_tools.py.
    settings.WORKER_MEMORY_TOOLS = False
    return CodexSetup(home=home, mcp_log=mcp_log, server=model_server)
