"""The `echo` and `command` executors, and choosing executors by name."""

import shlex
import sys
import textwrap
from decimal import Decimal

import pytest

from controlplane.models import TaskStatus
from worker.executors import (
    ExecutionControl,
    ExecutionRequest,
    UnknownExecutor,
    executor_get,
)
from worker.executors.command import CommandExecutor
from worker.executors.echo import EchoExecutor


def _request(**fields):
    values = {"task_id": 1, "project_id": 1, "user_id": 1, "prompt": "Fix the login bug"}
    return ExecutionRequest(**{**values, **fields})


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(body))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "Fix the login bug"),
        ({"goal": "Login works"}, "Login works"),
        ({"goal": "Login works", "turn": 2, "continuation_prompt": "add a test"}, "add a test"),
        ({"turn": 2, "continuation_prompt": "add a test", "is_resume": True}, "add a test"),
    ],
)
def test_echo_returns_exactly_what_it_was_asked_to_run(fields, expected):
    result = EchoExecutor().execute(_request(**fields), control=ExecutionControl())
    assert (result.status, result.result_text, result.cost_usd) == (
        "completed",
        expected,
        Decimal("0"),
    )


def test_executors_are_chosen_by_name():
    assert executor_get(name="echo").name == "echo"
    assert executor_get(name="command").name == "command"
    assert executor_get(name="codex").name == "codex"
    with pytest.raises(UnknownExecutor, match="known: codex, command, echo"):
        executor_get(name="gpt")


def test_command_gets_the_prompt_on_stdin_and_returns_stdout(tmp_path, settings):
    settings.WORKER_COMMAND = _script(
        tmp_path,
        """
        import os, sys
        text = sys.stdin.read()
        print(f"task {os.environ['CONTROLPLANE_TASK_ID']} turn "
              f"{os.environ['CONTROLPLANE_TASK_TURN']}: {text.upper()}")
        """,
    )

    result = CommandExecutor().execute(_request(task_id=42), control=ExecutionControl())

    assert result.status == "completed"
    assert result.result_text == "task 42 turn 1: FIX THE LOGIN BUG"


def test_command_failure_carries_the_stderr_tail(tmp_path, settings):
    settings.WORKER_COMMAND = _script(
        tmp_path,
        """
        import sys
        sys.stderr.write("x" * 5000 + "\\nfatal: repository not found\\n")
        sys.exit(3)
        """,
    )

    result = CommandExecutor().execute(_request(), control=ExecutionControl())

    assert result.status == "failed"
    assert result.failure_reason.startswith("exit status 3: ...")
    assert result.failure_reason.endswith("fatal: repository not found")
    assert len(result.failure_reason) < 2100


def test_command_timeout_fails_the_turn(tmp_path, settings):
    settings.WORKER_COMMAND = _script(tmp_path, "import time; time.sleep(30)")
    settings.WORKER_COMMAND_TIMEOUT_SECONDS = 0.5

    result = CommandExecutor().execute(_request(), control=ExecutionControl())

    assert result.status == "failed"
    assert result.failure_reason.startswith("timed out after 0.5s")


def test_a_missing_command_fails_the_turn(settings):
    settings.WORKER_COMMAND = "/nonexistent/agent --flag"
    result = CommandExecutor().execute(_request(), control=ExecutionControl())
    assert result.status == "failed"
    assert "could not start" in result.failure_reason


def test_an_unset_command_fails_the_turn(settings):
    settings.WORKER_COMMAND = ""
    result = CommandExecutor().execute(_request(), control=ExecutionControl())
    assert result.failure_reason == "WORKER_COMMAND is not set"


def test_cancelling_kills_the_command(tmp_path, settings):
    import threading
    import time

    settings.WORKER_COMMAND = _script(tmp_path, "import time; time.sleep(30)")
    control = ExecutionControl()
    threading.Timer(0.3, control.cancel).start()

    started = time.monotonic()
    result = CommandExecutor().execute(_request(), control=control)

    assert time.monotonic() - started < 10
    assert result.status == "failed"
    assert result.failure_reason == "cancelled by the worker"


def test_the_worker_runs_a_task_through_the_command_executor(
    project, task_factory, worker_factory, tmp_path, settings
):
    settings.WORKER_COMMAND = _script(
        tmp_path, "import sys; print('agent says: ' + sys.stdin.read())"
    )
    task = task_factory(project, prompt="Fix the login bug")

    worker_factory(CommandExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.result_text == "agent says: Fix the login bug"
    assert task.executor == "command"
