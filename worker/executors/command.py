"""Any CLI agent: `WORKER_COMMAND` runs with the prompt on stdin; its stdout is the result."""

import shlex
import subprocess

from django.conf import settings

from worker.executors.base import (
    ExecutionControl,
    ExecutionRequest,
    ExecutionResult,
    kill_process_group,
    memory_tool_env,
    memory_tool_files,
    spawn_agent,
    stderr_tail,
)
from worker.sandbox import (
    SandboxUnavailable,
    agent_env,
    command_files,
    sandboxed,
    task_room,
)


class CommandExecutor:
    """Runs `settings.WORKER_COMMAND` (split with shlex, no shell) once per turn.

    The child runs in the task's room and sandbox (worker/sandbox.py) with an allow-listed
    environment: the text to run on stdin, the task's coordinates
    (`CONTROLPLANE_TASK_ID`, `_TURN`, `_IS_RESUME`, `_THREAD_ID`) and the turn's memory tools
    (`CONTROLPLANE_MEMORY_TOKEN`, `_URL`, `_MCP_COMMAND`: docs/memory-tools.md).
    Exit status 0: completed,
    stdout (trailing new lines removed) is the result. Non-zero exit: failed, with the tail
    of stderr as the reason. Past `WORKER_COMMAND_TIMEOUT_SECONDS` the process group is killed
    and the turn fails.
    """

    name = "command"
    runs_agents = True  # started in the task's sandbox (worker/sandbox.py)

    def execute(self, request: ExecutionRequest, *, control: ExecutionControl) -> ExecutionResult:
        command_line = settings.WORKER_COMMAND.strip()
        if not command_line:
            return ExecutionResult.failed("WORKER_COMMAND is not set")
        timeout = settings.WORKER_COMMAND_TIMEOUT_SECONDS
        room = task_room(task_id=request.task_id)
        env = agent_env(
            room=room,
            extra={
                "CONTROLPLANE_TASK_ID": str(request.task_id),
                "CONTROLPLANE_TASK_TURN": str(request.turn),
                "CONTROLPLANE_TASK_IS_RESUME": "1" if request.is_resume else "0",
                "CONTROLPLANE_TASK_THREAD_ID": request.thread_id,
                **memory_tool_env(request),
            },
        )
        args = shlex.split(command_line)
        try:
            args = sandboxed(
                args,
                room=room,
                programs=args[:1],
                read_only=[*command_files(command_line), *memory_tool_files()],
                checkout=request.checkout,
            )
            process = spawn_agent(args, env=env, cwd=str(room.work))
        except (OSError, SandboxUnavailable) as exc:
            return ExecutionResult.failed(f"could not start {command_line!r}: {exc}")
        control.attach(process)
        try:
            try:
                stdout, stderr = process.communicate(request.text, timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_process_group(process)
                stdout, stderr = process.communicate()
                return ExecutionResult.failed(
                    f"timed out after {timeout:g}s; stderr: {stderr_tail(stderr)}".rstrip()
                )
        finally:
            control.detach()
        if control.cancelled:
            return ExecutionResult.failed("cancelled by the worker")
        if process.returncode != 0:
            return ExecutionResult.failed(
                f"exit status {process.returncode}: {stderr_tail(stderr)}".rstrip()
            )
        return ExecutionResult(status="completed", result_text=stdout.rstrip("\n"))
