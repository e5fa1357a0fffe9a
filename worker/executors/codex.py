"""The `codex` CLI: `codex exec --json`, its JSONL event stream read line by line.

A first turn runs `codex exec --json --skip-git-repo-check -C <dir> --sandbox <mode> [-m M] -`
with the text on stdin. A later turn (or a checkpoint resume of a turn whose thread is known)
runs `codex exec ... resume <thread_id> -`, continuing the same agent thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings

from worker.executors.base import (
    ExecutionControl,
    ExecutionRequest,
    ExecutionResult,
    TaskEventData,
    kill_process_group,
    spawn_agent,
    stderr_tail,
)

logger = logging.getLogger(__name__)

# Items kept as task events: the external-context gate of auto memory reads them.
EVENT_ITEM_TYPES = frozenset({"mcp_tool_call", "web_search"})
# An event item larger than this (as JSON) keeps its fields but loses its tool result body.
EVENT_MAX_JSON_CHARS = 16_000
ONE_MILLION = Decimal(1_000_000)
COST_QUANTUM = Decimal("0.000001")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
        )


def usage_price(*, usage: Usage, model: str, prices: dict[str, Any]) -> Decimal:
    """USD for `usage` at `prices[model]` (else `prices["default"]`), per 1M tokens.

    `cached_input_tokens` are a part of `input_tokens`, billed at the cached rate.
    """
    table = prices.get(model) or prices.get("default")
    if not table:
        logger.warning("no price for codex model %r and no default price: cost counted as 0", model)
        return Decimal("0")
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cost = (
        Decimal(usage.input_tokens - cached) * Decimal(str(table.get("input", 0)))
        + Decimal(cached) * Decimal(str(table.get("cached_input", table.get("input", 0))))
        + Decimal(usage.output_tokens) * Decimal(str(table.get("output", 0)))
    ) / ONE_MILLION
    return cost.quantize(COST_QUANTUM)


@dataclass
class CodexStream:
    """What a `codex exec --json` event stream said, fed one line at a time."""

    thread_id: str = ""
    last_message: str = ""
    usage: Usage = field(default_factory=Usage)
    turn_completed: bool = False
    turn_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    events: list[TaskEventData] = field(default_factory=list)
    malformed_lines: int = 0

    def feed(self, line: str) -> dict[str, Any] | None:
        """Take one stdout line; return the parsed event (None for blank or malformed lines)."""
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.malformed_lines += 1
            logger.warning("codex: skipped a malformed event line: %.200s", line)
            return None
        kind = event["type"]
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id") or self.thread_id)
        elif kind == "item.completed":
            self._item_completed(event.get("item"))
        elif kind == "turn.completed":
            self.turn_completed = True
            self.usage = self.usage + _usage(event.get("usage"))
        elif kind == "turn.failed":
            self.turn_failures.append(_message(event.get("error")) or "turn failed")
        elif kind == "error":
            self.errors.append(_message(event) or "error")
        return event

    def _item_completed(self, item: Any) -> None:
        if not isinstance(item, dict):
            self.malformed_lines += 1
            return
        item_type = item.get("type")
        if item_type == "agent_message" and isinstance(item.get("text"), str):
            self.last_message = item["text"]
        elif item_type in EVENT_ITEM_TYPES:
            self.events.append(TaskEventData(kind=item_type, data=_compact(item)))


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int:
        try:
            return max(0, int(raw.get(key) or 0))
        except (TypeError, ValueError):
            return 0

    return Usage(count("input_tokens"), count("cached_input_tokens"), count("output_tokens"))


def _message(raw: Any) -> str:
    if isinstance(raw, dict):
        return str(raw.get("message") or "")
    return str(raw or "")


def _compact(item: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(item, default=str)) <= EVENT_MAX_JSON_CHARS:
        return item
    compact = {key: value for key, value in item.items() if key != "result"}
    compact["result_truncated"] = True
    if len(json.dumps(compact, default=str)) > EVENT_MAX_JSON_CHARS:
        compact = {
            key: item.get(key)
            for key in ("id", "type", "server", "tool", "query", "status")
            if key in item
        }
        compact["truncated"] = True
    return compact


class CodexExecutor:
    """Runs the codex CLI (settings `WORKER_CODEX_*`), one process per turn."""

    name = "codex"

    def command_line(self, request: ExecutionRequest, *, workdir: Path) -> list[str]:
        args = [
            settings.WORKER_CODEX_BINARY,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-C",
            str(workdir),
            "--sandbox",
            settings.WORKER_CODEX_SANDBOX,
        ]
        if settings.WORKER_CODEX_MODEL:
            args += ["-m", settings.WORKER_CODEX_MODEL]
        if request.thread_id and (request.turn > 1 or request.is_resume):
            args += ["resume", request.thread_id]
        args.append("-")  # the prompt comes on stdin
        return args

    def workdir(self, request: ExecutionRequest) -> Path:
        path = Path(settings.WORKER_CODEX_WORKDIR) / f"task-{request.task_id}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def execute(self, request: ExecutionRequest, *, control: ExecutionControl) -> ExecutionResult:
        workdir = self.workdir(request)
        args = self.command_line(request, workdir=workdir)
        timeout = settings.WORKER_CODEX_TIMEOUT_SECONDS
        stream = CodexStream()
        try:
            process = spawn_agent(args, cwd=workdir, env=dict(os.environ))
        except OSError as exc:
            return ExecutionResult.failed(f"could not start codex ({args[0]}): {exc}")
        control.attach(process)
        stderr_lines: deque[str] = deque(maxlen=200)
        stderr_reader = threading.Thread(
            target=lambda: stderr_lines.extend(process.stderr), daemon=True
        )
        stderr_reader.start()
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            kill_process_group(process)

        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
        try:
            try:
                process.stdin.write(request.text)
                process.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # the process died early; its exit status and stderr tell why
            reported = request.thread_id
            for line in process.stdout:
                stream.feed(line)
                if stream.thread_id and stream.thread_id != reported:
                    control.report_thread_id(stream.thread_id)
                    reported = stream.thread_id
            returncode = process.wait()
        finally:
            timer.cancel()
            control.detach()
            stderr_reader.join(timeout=5)
        stderr_text = "".join(stderr_lines)
        thread_id = stream.thread_id or request.thread_id
        cost = usage_price(
            usage=stream.usage,
            model=settings.WORKER_CODEX_MODEL,
            prices=settings.WORKER_CODEX_PRICES,
        )
        common = {"cost_usd": cost, "thread_id": thread_id, "events": stream.events}
        if stream.malformed_lines:
            logger.warning(
                "codex: task %s had %d malformed event lines",
                request.task_id,
                stream.malformed_lines,
            )
        if control.cancelled:
            return ExecutionResult.failed("cancelled by the worker", **common)
        if timed_out.is_set():
            return ExecutionResult.failed(f"codex timed out after {timeout:g}s", **common)
        if returncode != 0:
            detail = stderr_tail(stderr_text) or "; ".join(stream.turn_failures + stream.errors)
            return ExecutionResult.failed(f"codex exit status {returncode}: {detail}", **common)
        if stream.turn_failures:
            return ExecutionResult.failed(
                "codex turn failed: " + "; ".join(stream.turn_failures), **common
            )
        if not stream.turn_completed:
            detail = "; ".join(stream.errors) or stderr_tail(stderr_text) or "no turn.completed"
            return ExecutionResult.failed(f"codex did not complete the turn: {detail}", **common)
        return ExecutionResult(status="completed", result_text=stream.last_message, **common)
