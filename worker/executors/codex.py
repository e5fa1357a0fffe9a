"""The `codex` CLI: `codex exec --json`, its JSONL event stream read line by line.

A first turn runs `codex exec --json --skip-git-repo-check -C <dir> --sandbox <mode> [-m M] -`
with the text on stdin. A later turn (or a checkpoint resume of a turn whose thread is known)
runs `codex exec ... resume <thread_id> -`, continuing the same agent thread.

The CLI runs in the task's room and sandbox (worker/sandbox.py) with a `CODEX_HOME` of the
task's own (`home/.codex`): the worker's `config.toml` and `auth.json` copied in before each
turn, the thread's session files restored into it, never another task's.

A turn's usage is its own, never the thread's: see `turn_usage` and docs/worker.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import threading
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings

from automemory.conf import MEMORY_SERVER_NAME
from automemory.services.redactor import redact
from controlplane.pricing import PriceTable
from controlplane.services.task_keys import TASK_KEY_ENV
from worker.executors.base import (
    MEMORY_COMMAND_ENV,
    MEMORY_URL_ENV,
    TOKEN_USAGE_FIELDS,
    ExecutionControl,
    ExecutionRequest,
    ExecutionResult,
    TaskEventData,
    TokenUsage,
    kill_process_group,
    memory_tool_env,
    memory_tool_files,
    spawn_agent,
    stderr_tail,
)
from worker.executors.codex_sessions import session_files
from worker.sandbox import (
    SandboxUnavailable,
    TaskRoom,
    agent_env,
    links_removed,
    sandboxed,
    task_room,
)

logger = logging.getLogger(__name__)

# Items kept as task events: the external-context gate of auto memory reads them.
EVENT_ITEM_TYPES = frozenset({"mcp_tool_call", "web_search"})
# The most characters of a memory tool call's arguments kept in its event.
MEMORY_CALL_ARGUMENT_CHARS = 2000
# An event item larger than this (as JSON) keeps its fields but loses its tool result body.
EVENT_MAX_JSON_CHARS = 16_000

# How `turn.completed.usage` of an `exec resume` run is read when the CLI's session record
# cannot be: the whole thread so far (codex 0.171.0), this turn only, or decided per run.
RESUME_USAGE_MODES = ("cumulative", "per_turn", "auto")

# stderr lines the CLI writes on healthy runs too; never a failure reason.
STDERR_NOISE = (
    re.compile(r"^WARNING: proceeding, even though we could not create PATH aliases"),
    re.compile(r"^Reading prompt from stdin"),
    # tracing lines of codex's own crates: "2026-11-30T16:03:30.719Z ERROR codex_core::...: ..."
    re.compile(r"^\S+\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+codex_\w+(::\w+)*:"),
)
# A Rust error report ends with a backtrace of unnamed frames: not worth a failure reason.
STDERR_BACKTRACE = "Stack backtrace:"


def usage_price(*, usage: TokenUsage, model: str, prices: dict[str, Any]) -> Decimal:
    """USD for `usage` at the `prices` table (`controlplane.pricing.PriceTable`)."""
    return PriceTable(prices, name="WORKER_CODEX_PRICES").cost_usd(
        model=model,
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        cache_write_input_tokens=usage.cache_write_input_tokens,
        output_tokens=usage.output_tokens,
    )


@dataclass(frozen=True)
class UsageDecision:
    """This turn's own usage and how it was told apart from the thread's."""

    usage: TokenUsage
    source: str  # session_record | fresh_thread | per_turn | cumulative | unknown_previous


def turn_usage(
    *,
    reported: TokenUsage,
    resumed: bool,
    session_before: TokenUsage | None,
    session_after: TokenUsage | None,
    thread_usage: TokenUsage | None,
    mode: str,
) -> UsageDecision:
    """This turn's own usage, whatever the CLI reports on `turn.completed`.

    1. The CLI's session record of the thread, read before and after the run, counts exactly
       what this run used (after - before; before is zero for a new thread), including model
       requests of a run that fails before `turn.completed`. When the ledger's total for the
       thread (`thread_usage`) is below the record's total before the run, an earlier run
       spent tokens no run was billed for (it was killed, or its result discarded): they are
       billed now, so the thread costs what the CLI counted, once.
    2. Without it, a run that started a new thread reports its own usage.
    3. A resumed thread: `per_turn` takes the report as it is; `cumulative` subtracts the
       thread's previous total recorded in the ledger (`thread_usage`, floored at 0 per
       count); `auto` (and an unknown mode) subtracts it when the report covers it and takes
       the report as per-turn when it does not. With no recorded total the whole report is
       billed, an upper bound (a warning is logged): under-billing would let a user run past
       their quota.
    """
    if session_after is not None and (session_before is not None or not resumed):
        billed = session_before or TokenUsage()
        if resumed and thread_usage is not None and billed.covers(thread_usage):
            billed = thread_usage
        own = session_after - billed
        this_run = session_after - (session_before or TokenUsage())
        if not reported.is_zero and reported not in (this_run, session_after):
            logger.warning(
                "codex: turn.completed usage %s matches neither this run (%s) nor the thread "
                "(%s) in the session record; the session record is used",
                reported,
                this_run,
                session_after,
            )
        return UsageDecision(own, "session_record")
    if not resumed:
        return UsageDecision(reported, "fresh_thread")
    if mode == "per_turn":
        return UsageDecision(reported, "per_turn")
    if thread_usage is None:
        logger.warning(
            "codex: a resumed thread with no recorded earlier usage; the reported usage %s is "
            "billed whole (WORKER_CODEX_RESUME_USAGE=%s)",
            reported,
            mode,
        )
        return UsageDecision(reported, "unknown_previous")
    if reported.covers(thread_usage):
        return UsageDecision(reported - thread_usage, "cumulative")
    if mode == "cumulative":
        logger.warning(
            "codex: reported thread usage %s is below the recorded total %s; this turn is "
            "billed the difference, floored at 0 per count",
            reported,
            thread_usage,
        )
        return UsageDecision(reported - thread_usage, "cumulative")
    return UsageDecision(reported, "per_turn")


# The files of the worker's CODEX_HOME a task's own CODEX_HOME gets a copy of.
CODEX_CONFIG_FILES = ("config.toml", "auth.json")


def codex_home() -> Path:
    """The worker's codex configuration (its `CODEX_HOME`, else ~/.codex): copied into each
    task's own CODEX_HOME, never shown to an agent whole."""
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def task_codex_home(room: TaskRoom) -> Path:
    """The task's own CODEX_HOME, with the worker's configuration files as they are now.

    The folder is the agent's to write in: links it left there are removed first
    (`links_removed`), and the files are written anew, never through what stands there."""
    home = room.home / ".codex"
    links_removed(home)
    home.mkdir(mode=0o700, exist_ok=True)
    links_removed(home / "sessions")
    source = codex_home()
    for name in CODEX_CONFIG_FILES:
        target = home / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        if (source / name).is_file():
            with (source / name).open("rb") as original:
                descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "wb") as copy:
                    shutil.copyfileobj(original, copy)
    return home


def session_record_path(*, thread_id: str, home: Path) -> Path | None:
    """The CLI's rollout file of a thread (`sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`),
    the last by name when there are several; None for none (see `codex_sessions`)."""
    files = session_files(thread_id=thread_id, home=home)
    return files[-1] if files else None


@dataclass(frozen=True)
class SessionRecord:
    """What the CLI's rollout file says about a thread: its token total and the last model."""

    total: TokenUsage
    model: str


def session_record_read(*, thread_id: str, home: Path) -> SessionRecord | None:
    """The thread's total usage as the CLI counted it (`token_count.total_token_usage`).

    None when there is no readable record (another machine's thread, a different CLI).
    """
    path = session_record_path(thread_id=thread_id, home=home)
    if path is None:
        return None
    total: TokenUsage | None = None
    model = ""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if '"token_count"' in line:
                    info = (_json_object(line).get("payload") or {}).get("info")
                    if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
                        total = token_usage_parse(info["total_token_usage"])
                elif '"turn_context"' in line:
                    payload = _json_object(line).get("payload")
                    if isinstance(payload, dict) and isinstance(payload.get("model"), str):
                        model = payload["model"]
    except OSError:
        logger.warning("codex: could not read the session record %s", path, exc_info=True)
        return None
    return SessionRecord(total=total or TokenUsage(), model=model)


def _json_object(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line, object_pairs_hook=_first_key_wins)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _first_key_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose key repeats keeps the first value (codex's `web_search` items have
    two `id` keys: the thread item's, then the model's); later ones go to `duplicate_keys`."""
    result: dict[str, Any] = {}
    duplicates: dict[str, list[Any]] = {}
    for key, value in pairs:
        if key in result:
            duplicates.setdefault(key, []).append(value)
        else:
            result[key] = value
    if duplicates:
        result["duplicate_keys"] = duplicates
    return result


def token_usage_parse(raw: Any) -> TokenUsage:
    """A `TokenUsage` from codex's usage object; missing or bad counts are 0."""
    if not isinstance(raw, dict):
        return TokenUsage()

    def count(key: str) -> int:
        try:
            return max(0, int(raw.get(key) or 0))
        except (TypeError, ValueError):
            return 0

    return TokenUsage(*(count(name) for name in TOKEN_USAGE_FIELDS))


@dataclass
class CodexStream:
    """What a `codex exec --json` event stream said, fed one line at a time."""

    thread_id: str = ""
    last_message: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    turn_completed: bool = False
    turn_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events: list[TaskEventData] = field(default_factory=list)
    malformed_lines: int = 0

    def feed(self, line: str) -> dict[str, Any] | None:
        """Take one stdout line; return the parsed event (None for blank or malformed lines)."""
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line, object_pairs_hook=_first_key_wins)
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
            self.usage = self.usage + token_usage_parse(event.get("usage"))
        elif kind == "turn.failed":
            self.turn_failures.append(_message(event.get("error")) or "turn failed")
        elif kind == "error":
            self.errors.append(_message(event) or "error")
        return event

    def failure_detail(self) -> str:
        """Why the turn failed, from the events: the `turn.failed` message, else the last error."""
        if self.turn_failures:
            return "; ".join(self.turn_failures)
        return self.errors[-1] if self.errors else ""

    def _item_completed(self, item: Any) -> None:
        if not isinstance(item, dict):
            self.malformed_lines += 1
            return
        item_type = item.get("type")
        if item_type == "agent_message" and isinstance(item.get("text"), str):
            self.last_message = item["text"]
        elif item_type == "error":
            # a non-fatal warning (e.g. "Model metadata for `x` not found"): the turn goes on
            self.warnings.append(_message(item))
            logger.info("codex warning: %.500s", _message(item))
        elif item_type in EVENT_ITEM_TYPES:
            if item.get("server") == MEMORY_SERVER_NAME:
                item = _memory_call(item)
            self.events.append(TaskEventData(kind=item_type, data=_compact(item)))


def stderr_reason(text: str) -> str:
    """The stderr tail worth showing: without the CLI's routine noise and backtrace frames."""
    kept = []
    for line in (text or "").splitlines():
        if line.strip() == STDERR_BACKTRACE:
            break
        if any(pattern.match(line) for pattern in STDERR_NOISE):
            continue
        kept.append(line)
    return stderr_tail("\n".join(kept))


def _message(raw: Any) -> str:
    if isinstance(raw, dict):
        return str(raw.get("message") or "")
    return str(raw or "")


def _memory_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call of the memory tools, as kept: which tool, and its arguments redacted; never
    its answer (memory text the database holds already) nor a note's secrets (the feedback
    row keeps the note redacted)."""
    kept = {key: item[key] for key in ("id", "type", "server", "tool", "status") if key in item}
    arguments = item.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    kept["arguments"] = redact(text)[:MEMORY_CALL_ARGUMENT_CHARS]
    kept["result_dropped"] = True
    return kept


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


# What the memory relay inherits of the agent's environment: its key and address, and what
# any program needs to start.
MEMORY_SERVER_ENV = (TASK_KEY_ENV, MEMORY_URL_ENV, "PATH", "HOME", "TMPDIR", "LANG")


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


# Restore outcomes after which the local files are the stored record's state.
STORED_STATES = ("current", "restored")


def _record_behind_ledger(request: ExecutionRequest, before: SessionRecord | None) -> str:
    """Why the thread's stored record may not be resumed: it counts fewer tokens than the usage
    ledger billed for the thread, so a finished run's record was never stored (the database
    was down after that run, say) and resuming would drop that run from the thread. "" if not.
    """
    billed = request.thread_usage
    if before is None or billed is None or before.total.covers(billed):
        return ""
    return (
        f"codex thread {request.thread_id} cannot be resumed: its stored session record "
        f"counts {before.total}, less than the usage ledger billed for the thread ({billed}); "
        "a run's record was not stored and resuming would lose it"
    )


class CodexExecutor:
    """Runs the codex CLI (settings `WORKER_CODEX_*`), one process per turn."""

    name = "codex"
    runs_agents = True  # started in the task's sandbox (worker/sandbox.py)

    def resumes(self, request: ExecutionRequest) -> bool:
        return bool(request.thread_id) and (request.turn > 1 or request.is_resume)

    def command_line(
        self, request: ExecutionRequest, *, workdir: Path, env: dict[str, str] | None = None
    ) -> list[str]:
        args = [
            settings.WORKER_CODEX_BINARY,
            "exec",
            *memory_server_config(env or {}),
            "--json",
            "--skip-git-repo-check",
            "-C",
            str(workdir),
            "--sandbox",
            settings.WORKER_CODEX_SANDBOX,
        ]
        if settings.WORKER_CODEX_MODEL:
            args += ["-m", settings.WORKER_CODEX_MODEL]
        if self.resumes(request):
            args += ["resume", request.thread_id]
        args.append("-")  # the prompt comes on stdin
        return args

    def execute(self, request: ExecutionRequest, *, control: ExecutionControl) -> ExecutionResult:
        room = task_room(task_id=request.task_id)
        home = task_codex_home(room)
        env = agent_env(room=room, extra={"CODEX_HOME": str(home), **memory_tool_env(request)})
        args = self.command_line(request, workdir=room.work, env=env)
        timeout = settings.WORKER_CODEX_TIMEOUT_SECONDS
        resumes = self.resumes(request)
        restored = ""
        if resumes and control.sessions is not None:
            try:
                restored = control.sessions.restore(thread_id=request.thread_id, home=home)
            except Exception as exc:
                return ExecutionResult.failed(
                    f"codex thread {request.thread_id} cannot be resumed: {exc}",
                    thread_id=request.thread_id,
                )
        before = session_record_read(thread_id=request.thread_id, home=home) if resumes else None
        behind = _record_behind_ledger(request, before) if restored in STORED_STATES else ""
        if behind:
            return ExecutionResult.failed(behind, thread_id=request.thread_id)
        stream = CodexStream()
        try:
            args = sandboxed(
                args,
                room=room,
                programs=[settings.WORKER_CODEX_BINARY],
                read_only=memory_tool_files(),
            )
            process = spawn_agent(args, cwd=str(room.work), env=env)
        except (OSError, SandboxUnavailable) as exc:
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
        planted = links_removed(home / "sessions")  # the agent has exited: nothing races this
        if planted:
            logger.warning("codex: task %s left %d links in its sessions", request.task_id, planted)
        thread_id = stream.thread_id or request.thread_id
        resumed = resumes and thread_id == request.thread_id
        after = session_record_read(thread_id=thread_id, home=home) if thread_id else None
        if thread_id and control.sessions is not None:
            control.sessions.store(thread_id=thread_id, home=home)
        decision = turn_usage(
            reported=stream.usage,
            resumed=resumed,
            session_before=before.total if before and resumed else None,
            session_after=after.total if after else None,
            thread_usage=request.thread_usage,
            mode=settings.WORKER_CODEX_RESUME_USAGE,
        )
        model = settings.WORKER_CODEX_MODEL or (after.model if after else "")
        cost = usage_price(usage=decision.usage, model=model, prices=settings.WORKER_CODEX_PRICES)
        logger.info(
            "codex: task %s turn %s used %s (%s): $%s",
            request.task_id,
            request.turn,
            decision.usage,
            decision.source,
            cost,
        )
        common = {
            "cost_usd": cost,
            "thread_id": thread_id,
            "events": stream.events,
            "usage": decision.usage,
            "model": model,
        }
        if stream.malformed_lines:
            logger.warning(
                "codex: task %s had %d malformed event lines",
                request.task_id,
                stream.malformed_lines,
            )
        if control.cancelled:
            return ExecutionResult.failed("cancelled by the worker", **common)
        if timed_out.is_set():
            detail = stream.failure_detail()
            return ExecutionResult.failed(
                f"codex timed out after {timeout:g}s" + (f": {detail}" if detail else ""), **common
            )
        if returncode != 0:
            detail = stream.failure_detail() or stderr_reason(stderr_text) or "no event, no stderr"
            if restored == "absent":
                detail += (
                    f" (no session record of thread {request.thread_id} is stored, and none is"
                    " in the task's CODEX_HOME on this worker)"
                )
            return ExecutionResult.failed(f"codex exit status {returncode}: {detail}", **common)
        if stream.turn_failures:
            return ExecutionResult.failed("codex turn failed: " + stream.failure_detail(), **common)
        if not stream.turn_completed:
            detail = stream.failure_detail() or stderr_reason(stderr_text) or "no turn.completed"
            return ExecutionResult.failed(f"codex did not complete the turn: {detail}", **common)
        return ExecutionResult(status="completed", result_text=stream.last_message, **common)
