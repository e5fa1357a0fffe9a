"""The `codex` CLI as an executor: `codex exec --json`, one process per turn.

A first turn runs `codex exec --json -C <dir> --sandbox <mode> [-m M] -` with the text on
stdin; `<dir>` is the task's worktree on a project with a repository, else an empty folder
(then with `--skip-git-repo-check`, since it is no git repository). A later turn (or a
checkpoint resume of a turn whose thread is known) runs `codex exec ... resume <thread_id> -`,
continuing the same agent thread.

The CLI runs in the task's room and sandbox (worker/sandbox.py) with a `CODEX_HOME` of the
task's own (`home/.codex`): the worker's `config.toml` and `auth.json` copied in before each
turn, the thread's session files restored into it from its session record before a resume
and the record written after the run (`worker.codex.session_store`, under the run's
`ExecutionControl.holder`), never another task's. Its event stream is read by
`worker.codex.stream`, its usage by `worker.codex.usage`; the memory MCP server comes from
`worker.codex.mcp_config`.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections import deque
from pathlib import Path

from django.conf import settings

from worker.codex.mcp_config import memory_server_config
from worker.codex.session_store import SessionStore
from worker.codex.stream import CodexStream, stderr_reason
from worker.codex.usage import SessionTotals, session_totals_read, turn_usage, usage_price
from worker.executors.base import (
    ExecutionControl,
    ExecutionRequest,
    ExecutionResult,
    kill_process_group,
    memory_tool_env,
    memory_tool_files,
    spawn_agent,
)
from worker.sandbox import (
    SandboxUnavailable,
    TaskRoom,
    agent_env,
    links_removed,
    sandboxed,
    task_room,
)

logger = logging.getLogger(__name__)


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


# Restore outcomes after which the local files are the session record's state.
STORED_STATES = ("current", "restored")


def _session_behind_ledger(request: ExecutionRequest, before: SessionTotals | None) -> str:
    """Why the thread's session record may not be resumed: it counts fewer tokens than the
    usage ledger billed for the thread, so a finished run's session record was never written
    (the database was down after that run, say) and resuming would drop that run from the thread.
    "" if not.
    """
    billed = request.thread_usage
    if before is None or billed is None or before.total.covers(billed):
        return ""
    return (
        f"codex thread {request.thread_id} cannot be resumed: its session record "
        f"counts {before.total}, less than the usage ledger billed for the thread ({billed}); "
        "a run's session record was not written and resuming would lose it"
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
            *([] if request.checkout is not None else ["--skip-git-repo-check"]),
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
        sessions = SessionStore(control.holder) if control.holder is not None else None
        if resumes and sessions is not None:
            try:
                restored = sessions.restore(thread_id=request.thread_id, home=home)
            except Exception as exc:
                return ExecutionResult.failed(
                    f"codex thread {request.thread_id} cannot be resumed: {exc}",
                    thread_id=request.thread_id,
                )
        before = session_totals_read(thread_id=request.thread_id, home=home) if resumes else None
        behind = _session_behind_ledger(request, before) if restored in STORED_STATES else ""
        if behind:
            return ExecutionResult.failed(behind, thread_id=request.thread_id)
        stream = CodexStream()
        try:
            args = sandboxed(
                args,
                room=room,
                programs=[settings.WORKER_CODEX_BINARY],
                read_only=memory_tool_files(),
                checkout=request.checkout,
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
        after = session_totals_read(thread_id=thread_id, home=home) if thread_id else None
        if thread_id and sessions is not None:
            sessions.store(thread_id=thread_id, home=home)
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
