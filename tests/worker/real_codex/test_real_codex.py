"""The `codex` executor driving the real Codex CLI, through the real worker loop.

The model is `responses_server.ResponsesServer` (HTTP on 127.0.0.1, SSE); the MCP server is
`mcp_server.py`. Costs are checked against the usage the model server reported for each
request, priced here by hand from `PRICES`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from controlplane.models import TaskEvent, TaskStatus, UsageRecord
from controlplane.months import month_of
from controlplane.services.usage import monthly_spend_get
from tests.worker.real_codex.conftest import PRICES
from tests.worker.real_codex.responses_server import (
    Reply,
    mcp_tool_call,
    message,
    web_search_call,
)
from worker.codex import CodexExecutor
from worker.codex import executor as codex_executor
from worker.codex.stream import CodexStream
from worker.executors import ExecutionRequest
from worker.models import TaskRun

RATES = {name: Decimal(value) for name, value in PRICES["test-model"].items()}
# Three turns of a growing conversation: each request re-sends the thread so far, mostly cached.
TURN_REPLIES = (
    Reply(
        items=(message("Fixed the login bug."),),
        input_tokens=1200,
        cache_write_tokens=300,
        output_tokens=60,
        reasoning_tokens=20,
    ),
    Reply(
        items=(message("Added a test."),),
        input_tokens=1300,
        cached_tokens=1100,
        output_tokens=80,
        reasoning_tokens=30,
    ),
    Reply(
        items=(message("Updated the changelog."),),
        input_tokens=1400,
        cached_tokens=1250,
        cache_write_tokens=50,
        output_tokens=40,
    ),
)


def cost_of(*requests) -> Decimal:
    """What the model server's reported usage costs at PRICES (reasoning is inside output)."""
    total = Decimal(0)
    for request in requests:
        usage = request.usage
        uncached = usage["input_tokens"] - usage["cached_tokens"] - usage["cache_write_tokens"]
        total += (
            uncached * RATES["input"]
            + usage["cached_tokens"] * RATES["cached_input"]
            + usage["cache_write_tokens"] * RATES["cache_write"]
            + usage["output_tokens"] * RATES["output"]
        )
    return (total / 1_000_000).quantize(Decimal("0.000001"))


def continue_task(task, prompt: str) -> None:
    task.refresh_from_db()
    task.status, task.turn, task.continuation_prompt = TaskStatus.QUEUED, task.turn + 1, prompt
    task.save()


def input_texts(request) -> str:
    return json.dumps(request.body.get("input"))


def test_a_first_turn_costs_what_the_model_server_reported(
    codex_setup, project, task_factory, worker_factory
):
    codex_setup.server.script(TURN_REPLIES[0])
    task = task_factory(project, prompt="Fix the login bug")

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    [request] = codex_setup.server.model_requests()
    assert task.status == TaskStatus.COMPLETED
    assert task.result_text == "Fixed the login bug."
    assert task.thread_id
    assert "Fix the login bug" in input_texts(request)
    assert request.body["model"] == "test-model"
    assert task.cost_usd == cost_of(request) == Decimal("0.003180")


def test_the_pinned_cli_reports_thread_totals_on_resume(codex_setup, tmp_path):
    """Why WORKER_CODEX_RESUME_USAGE defaults to `cumulative`: what `turn.completed` says."""
    codex_setup.server.script(*TURN_REPLIES)
    executor, thread_id, reported = CodexExecutor(), "", []
    for turn in (1, 2, 3):
        request = ExecutionRequest(
            task_id=1,
            project_id=1,
            user_id=1,
            prompt="Fix the login bug",
            turn=turn,
            thread_id=thread_id,
            continuation_prompt=f"turn {turn}",
        )
        args = executor.command_line(request, workdir=tmp_path)
        run = subprocess.run(
            args, input=request.text, capture_output=True, text=True, timeout=60, check=True
        )
        stream = CodexStream()
        for line in run.stdout.splitlines():
            stream.feed(line)
        thread_id = stream.thread_id
        reported.append(stream.usage.input_tokens)
    assert reported == [1200, 1200 + 1300, 1200 + 1300 + 1400]


@pytest.mark.parametrize("signal_used", ["session_file", "ledger"])
def test_three_turns_cost_what_the_model_server_was_asked_for(
    codex_setup, project, task_factory, worker_factory, monkeypatch, signal_used
):
    """Each run in the ledger costs what its request cost, the task and the month their sum,
    whether the turn's own usage comes from the CLI's session file or, without one, from
    the CLI's thread total less the ledger's (WORKER_CODEX_RESUME_USAGE=cumulative)."""
    if signal_used == "ledger":
        monkeypatch.setattr(codex_executor, "session_totals_read", lambda **kwargs: None)
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt="Fix the login bug")
    worker = worker_factory(CodexExecutor())
    worker.run_once()
    for prompt in ("Add a test", "Update the changelog"):
        continue_task(task, prompt)
        worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert task.result_text == "Updated the changelog."
    requests = codex_setup.server.model_requests()
    assert "Fix the login bug" in input_texts(requests[2])  # one thread, continued
    runs = UsageRecord.objects.filter(task=task).order_by("id")
    assert [(run.turn, run.cost_usd) for run in runs] == [
        (turn, cost_of(request)) for turn, request in enumerate(requests, start=1)
    ]
    assert [(run.input_tokens, run.cached_input_tokens, run.output_tokens) for run in runs] == [
        (1200, 0, 60),
        (1300, 1100, 80),
        (1400, 1250, 40),
    ]
    assert {(run.model, run.thread_id) for run in runs} == {("test-model", task.thread_id)}
    assert task.cost_usd == cost_of(*requests) == Decimal("0.006065")
    spend = monthly_spend_get(user_ids=[task.user_id], month=month_of(timezone.now()))
    assert spend[task.user_id] == Decimal("0.006065")


def test_an_mcp_tool_call_and_a_web_search_are_stored_as_task_events(
    codex_setup, project, task_factory, worker_factory
):
    codex_setup.server.script(
        Reply(items=(mcp_tool_call("docs", "search", {"query": "session timeout"}, "call_1"),)),
        Reply(items=(web_search_call("django session expiry"), message("Sessions expire."))),
    )
    task = task_factory(project, prompt="How long do sessions last?")

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert task.result_text == "Sessions expire."
    assert [json.loads(call)["arguments"] for call in codex_setup.mcp_calls()] == [
        {"query": "session timeout"}
    ]
    events = list(TaskEvent.objects.filter(task=task).order_by("id"))
    assert [(event.turn, event.kind) for event in events] == [
        (1, "mcp_tool_call"),
        (1, "web_search"),
    ]
    mcp, search = events[0].data, events[1].data
    assert (mcp["server"], mcp["tool"], mcp["status"]) == ("docs", "search", "completed")
    assert "Sessions expire after 15 minutes" in json.dumps(mcp["result"])
    assert search["query"] == "django session expiry"
    assert search["id"] != search["duplicate_keys"]["id"][0]  # the CLI's two ids, both kept
    # the tool result went back to the model in a second request; both are billed
    requests = codex_setup.server.model_requests()
    assert "Sessions expire after 15 minutes" in input_texts(requests[1])
    assert task.cost_usd == cost_of(*requests)


@pytest.mark.parametrize(
    ("status", "message_part"),
    [
        (500, "currently experiencing high demand"),
        (429, "429 Too Many Requests"),
    ],
)
def test_a_model_error_fails_the_task_with_the_model_s_reason(
    codex_setup, project, task_factory, worker_factory, status, message_part
):
    codex_setup.server.script(Reply(status=status, error_message="the model is down"))
    task = task_factory(project)

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith("codex exit status 1: ")
    assert message_part in task.failure_reason
    assert "PATH aliases" not in task.failure_reason
    assert "codex_core" not in task.failure_reason
    assert len(codex_setup.server.model_requests()) == 1  # no retries: it failed fast
    assert task.cost_usd == 0


def test_a_run_that_fails_after_a_model_request_is_billed_for_it(
    codex_setup, project, task_factory, worker_factory
):
    codex_setup.server.script(
        Reply(items=(mcp_tool_call("docs", "search", {"query": "x"}, "call_1"),)),
        Reply(status=500),
    )
    task = task_factory(project)

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    first, failed = codex_setup.server.model_requests()
    assert task.status == TaskStatus.FAILED
    assert failed.status == 500
    assert task.cost_usd == cost_of(first) > 0


def test_a_hanging_model_hits_the_timeout(
    codex_setup, project, task_factory, worker_factory, settings
):
    # Long enough for the CLI to start and reach the model on a loaded machine (under CI it
    # once took more than 2 s), so the timeout is the model's hang, not the start-up.
    settings.WORKER_CODEX_TIMEOUT_SECONDS = 8
    codex_setup.server.script(Reply(hang=True))
    task = task_factory(project)

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "codex timed out after 8s"
    assert task.thread_id  # kept: a later turn can resume it
    assert len(codex_setup.server.model_requests()) == 1


def test_a_checkpoint_resume_continues_the_thread_and_bills_its_own_run(
    codex_setup, project, task_factory, worker_factory
):
    """The worker is stopped at once mid-turn (two signals), the task re-queued as a resume
    of the same turn, and the next worker continues the same codex thread."""
    server = codex_setup.server
    server.script(
        Reply(items=(mcp_tool_call("docs", "search", {"query": "login"}, "call_1"),)),
        Reply(hang=True),
        Reply(items=(message("Resumed and done."),), input_tokens=2000, cached_tokens=1500),
    )
    task = task_factory(project, prompt="Fix the login bug")
    first = worker_factory(CodexExecutor(), worker_id="worker-a")

    def stop_when_the_model_hangs():
        deadline = time.monotonic() + 30
        while len(server.model_requests()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        first.handle_signal(signal.SIGTERM)
        first.handle_signal(signal.SIGTERM)

    stopper = threading.Thread(target=stop_when_the_model_hangs)
    stopper.start()
    report = first.run_once()
    stopper.join()

    task.refresh_from_db()
    assert [run.outcome for run in report.runs] == ["requeued"]
    assert (task.status, task.turn, task.is_resume) == (TaskStatus.QUEUED, 1, True)
    thread_id = task.thread_id
    assert thread_id

    worker_factory(CodexExecutor(), worker_id="worker-b").run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert task.result_text == "Resumed and done."
    assert task.thread_id == thread_id
    requests = server.model_requests()
    assert len(requests) == 3
    assert "Sessions expire after 15 minutes" in input_texts(requests[2])  # the same thread
    # The resumed run is billed its own request. The first request was paid by the run the
    # worker re-queued, which the worker does not record in the ledger (see docs/worker.md).
    assert task.cost_usd == cost_of(requests[2])
    assert list(TaskRun.objects.filter(task=task).values_list("outcome", flat=True)) == [
        "requeued",
        "completed",
    ]
