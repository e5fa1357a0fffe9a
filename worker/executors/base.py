"""The executor interface: an in-memory request in, a result out.

The worker builds an `ExecutionRequest` from the claimed task (after memory injection, which
changes only this in-memory copy) and hands it to an executor with an `ExecutionControl`,
through which the worker can stop a running subprocess from another thread or a signal handler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol

from django.conf import settings

from controlplane.services.task_keys import TASK_KEY_ENV
from worker.sandbox import TaskCheckout, command_files

logger = logging.getLogger(__name__)

# How much of a failing process's stderr ends up in the task's failure reason.
STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class TokenUsage:
    """Tokens one turn used, as the model counts them.

    `cached_input_tokens` and `cache_write_input_tokens` are parts of `input_tokens`;
    `reasoning_output_tokens` is a part of `output_tokens` (never billed twice).
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            *(getattr(self, name) + getattr(other, name) for name in TOKEN_USAGE_FIELDS)
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            *(max(0, getattr(self, name) - getattr(other, name)) for name in TOKEN_USAGE_FIELDS)
        )

    def covers(self, other: TokenUsage) -> bool:
        """True when every count here is at least the one in `other`."""
        return all(getattr(self, name) >= getattr(other, name) for name in TOKEN_USAGE_FIELDS)

    @property
    def is_zero(self) -> bool:
        return not any(getattr(self, name) for name in TOKEN_USAGE_FIELDS)


TOKEN_USAGE_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


@dataclass(frozen=True)
class ExecutionRequest:
    """Everything an executor needs to run one turn of a task. Never written back to the task."""

    task_id: int
    project_id: int
    user_id: int
    prompt: str
    goal: str | None = None
    turn: int = 1
    is_resume: bool = False
    kind: str = "standard"
    parent_task_id: int | None = None
    thread_id: str = ""
    continuation_prompt: str = ""
    # The usage already recorded (in the usage ledger) for earlier runs of this task's agent
    # thread; None when nothing is recorded. An executor whose agent reports thread-cumulative
    # usage on resume subtracts it to get this turn's own usage.
    thread_usage: TokenUsage | None = None
    # The memory tool key of this turn (controlplane.services.task_keys): handed to the
    # agent's memory server only, never logged (kept out of the repr).
    memory_key: str = field(default="", repr=False)
    # A task on a project with a repository: its room's `work` folder is the task's worktree
    # (the executor runs the agent there), reading these git objects. None without one.
    checkout: TaskCheckout | None = None

    @property
    def text(self) -> str:
        """What to run: a continuation's prompt, else the goal of a goal task, else the prompt."""
        if self.turn > 1 and self.continuation_prompt:
            return self.continuation_prompt
        if self.goal:
            return self.goal
        return self.prompt


@dataclass(frozen=True)
class TaskEventData:
    """Something worth keeping from a run (an MCP tool call, a web search): a TaskEvent row."""

    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class ExecutionResult:
    status: Literal["completed", "failed"]
    result_text: str = ""
    cost_usd: Decimal = Decimal("0")
    thread_id: str = ""
    events: list[TaskEventData] = field(default_factory=list)
    failure_reason: str = ""
    # This turn's own usage (never thread-cumulative) and the model it was priced for;
    # `cost_usd` is its price. The worker writes both to the usage ledger.
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = ""

    @classmethod
    def failed(cls, reason: str, **fields: Any) -> ExecutionResult:
        return cls(status="failed", failure_reason=reason, **fields)


@dataclass(frozen=True)
class RunHolder:
    """Who holds the run: the task, the worker, the turn and the claim's time (the fence
    every write of the run checks, so a worker whose task was taken over writes nothing)."""

    task_id: int
    worker_id: str
    turn: int
    claimed_at: datetime | None = None


class ExecutionControl:
    """The worker's handle on a running execution.

    An executor that starts a subprocess attaches it; `cancel()` (from a signal handler, the
    heartbeat thread or a test) kills the subprocess's whole process group. `report_thread_id`
    lets an executor publish an agent thread id as soon as it is known, so a checkpoint resume
    can continue the thread even if this worker dies before the turn ends. `holder`, when the
    worker gives one, says who holds the run: an executor that keeps state centrally (the
    `codex` executor's session records) writes it under that fence.
    """

    def __init__(
        self,
        *,
        on_thread_id: Callable[[str], None] | None = None,
        holder: RunHolder | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._on_thread_id = on_thread_id
        self.holder = holder
        self.cancelled = False

    def attach(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._process = process
            if self.cancelled:
                kill_process_group(process)

    def detach(self) -> None:
        with self._lock:
            self._process = None

    def cancel(self) -> None:
        """Stop the execution now: kill its subprocess (if any). Safe to call more than once."""
        with self._lock:
            self.cancelled = True
            if self._process is not None:
                kill_process_group(self._process)

    def report_thread_id(self, thread_id: str) -> None:
        if self._on_thread_id is None or not thread_id:
            return
        try:
            self._on_thread_id(thread_id)
        except Exception:
            logger.warning("could not record thread id %s", thread_id, exc_info=True)


# The memory tools (docs/memory-tools.md): the environment variables an agent process gets.
MEMORY_COMMAND_ENV = "CONTROLPLANE_MEMORY_MCP_COMMAND"
MEMORY_URL_ENV = "CONTROLPLANE_MEMORY_URL"


def memory_tool_env(request: ExecutionRequest) -> dict[str, str]:
    """What gives an agent this turn's memory tools: the task key (`CONTROLPLANE_MEMORY_TOKEN`),
    the control plane's address the tools are served at (`CONTROLPLANE_MEMORY_URL`) and the
    command line of the stdio `memory` MCP server that relays to them
    (`CONTROLPLANE_MEMORY_MCP_COMMAND`); empty when `WORKER_MEMORY_TOOLS` is off or the turn
    has no key."""
    if not settings.WORKER_MEMORY_TOOLS or not request.memory_key:
        return {}
    return {
        TASK_KEY_ENV: request.memory_key,
        MEMORY_URL_ENV: settings.WORKER_MEMORY_API_URL,
        MEMORY_COMMAND_ENV: settings.WORKER_MEMORY_MCP_COMMAND,
    }


def memory_tool_files() -> list[str]:
    """The files the memory relay's command line names (its program and script): shown to a
    sandboxed agent read-only, so its MCP client can start the relay."""
    if not settings.WORKER_MEMORY_TOOLS:
        return []
    return command_files(settings.WORKER_MEMORY_MCP_COMMAND)


def spawn_agent(
    args: list[str], *, env: dict[str, str], cwd: str | None = None
) -> subprocess.Popen:
    """Start an agent process: text pipes on stdin/stdout/stderr, in its own session.

    Its own session keeps a Ctrl-C meant for the worker away from the agent and lets
    `kill_process_group` stop the agent with everything it started.
    """
    return subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def kill_process_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        # Executors start their subprocess in a new session: its pid is its process group.
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            process.kill()


class Executor(Protocol):
    """Runs one turn. Must not raise for an agent failure: return a failed result instead."""

    name: str

    def execute(
        self, request: ExecutionRequest, *, control: ExecutionControl
    ) -> ExecutionResult: ...


def stderr_tail(text: str, limit: int = STDERR_TAIL_CHARS) -> str:
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    return "..." + text[-limit:]
