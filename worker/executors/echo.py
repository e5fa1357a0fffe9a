"""The embedded default executor: returns exactly the text it was asked to run, at no cost."""

from worker.executors.base import ExecutionControl, ExecutionRequest, ExecutionResult


class EchoExecutor:
    """Deterministic: `result_text` is the request's text (so injected memories are visible)."""

    name = "echo"

    def execute(self, request: ExecutionRequest, *, control: ExecutionControl) -> ExecutionResult:
        return ExecutionResult(status="completed", result_text=request.text)
