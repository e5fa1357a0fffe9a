"""The `memory` MCP server as codex is told of it: `-c` overrides on its command line."""

from __future__ import annotations

import json
import shlex

from django.conf import settings

from automemory.conf import MEMORY_SERVER_NAME
from automemory.services.task_keys import TASK_KEY_ENV
from worker.executors.base import MEMORY_COMMAND_ENV, MEMORY_URL_ENV

# What the memory relay inherits of the agent's environment: its key and address, and what
# any program needs to start.
MEMORY_SERVER_ENV = (TASK_KEY_ENV, MEMORY_URL_ENV, "PATH", "HOME", "TMPDIR", "LANG")
# In an isolated sandbox, the way to a memory address that is not on the loopback: the proxy
# the in-sandbox bridge names (worker/netbridge.py sets it in the CLI's environment).
PROXY_ENV = "CONTROLPLANE_MEMORY_PROXY"


def memory_server_config(env: dict[str, str]) -> list[str]:
    """`-c` overrides that give codex the `memory` MCP server for this run (none without a
    task key in `env`): its command line, the names of the variables it inherits from the
    CLI's environment (`MEMORY_SERVER_ENV` only; values never go on the command line, so the
    key stays out of `ps`), and its tools approved, as `codex exec` never asks. A `memory` server of
    the user's own config.toml is replaced. The CLI starts the model's first request once
    its optional MCP servers are up or `mcp_optional_startup_grace_ms` has passed: that is
    raised to `WORKER_MEMORY_MCP_STARTUP_SECONDS` so the server (a Django process, a second
    or two to start) is there; a server that fails leaves the run without memory tools,
    never fails it (memory is fail-open)."""
    if not env.get(TASK_KEY_ENV) or not env.get(MEMORY_COMMAND_ENV):
        return []
    command, *arguments = shlex.split(env[MEMORY_COMMAND_ENV])
    names = sorted(name for name in MEMORY_SERVER_ENV if name in env)
    if settings.WORKER_SANDBOX_NETWORK == "isolated":
        names.append(PROXY_ENV)
    table = f"mcp_servers.{MEMORY_SERVER_NAME}"
    overrides = {
        "command": json.dumps(command),
        "args": json.dumps(arguments),
        "env_vars": json.dumps(names),
        "default_tools_approval_mode": '"approve"',
        "startup_timeout_sec": str(int(settings.WORKER_MEMORY_MCP_STARTUP_SECONDS)),
    }
    grace_ms = int(settings.WORKER_MEMORY_MCP_STARTUP_SECONDS * 1000)
    args = [part for key, value in overrides.items() for part in ("-c", f"{table}.{key}={value}")]
    return [*args, "-c", f"mcp_optional_startup_grace_ms={grace_ms}"]
