"""Executors chosen by name: `echo` (default), `command`, `codex` (`worker.codex`)."""

from worker.codex.executor import CodexExecutor
from worker.executors.base import (
    ExecutionControl,
    ExecutionRequest,
    ExecutionResult,
    Executor,
    TaskEventData,
)
from worker.executors.command import CommandExecutor
from worker.executors.echo import EchoExecutor

EXECUTORS: dict[str, type] = {
    EchoExecutor.name: EchoExecutor,
    CommandExecutor.name: CommandExecutor,
    CodexExecutor.name: CodexExecutor,
}


class UnknownExecutor(ValueError):
    pass


def executor_get(*, name: str) -> Executor:
    """A new executor registered under `name`; UnknownExecutor names the known ones."""
    try:
        return EXECUTORS[name]()
    except KeyError:
        known = ", ".join(sorted(EXECUTORS))
        raise UnknownExecutor(f"unknown executor {name!r} (known: {known})") from None


__all__ = [
    "EXECUTORS",
    "ExecutionControl",
    "ExecutionRequest",
    "ExecutionResult",
    "Executor",
    "TaskEventData",
    "UnknownExecutor",
    "executor_get",
]
