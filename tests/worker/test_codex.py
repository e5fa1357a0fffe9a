"""The `codex` executor against a fake `codex` binary that prints a realistic event stream."""

import json
import logging
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from controlplane.models import TaskEvent, TaskStatus
from worker.executors import ExecutionControl, ExecutionRequest
from worker.executors.codex import CodexExecutor, CodexStream, Usage, usage_price
from worker.models import TaskRun

FAKE = Path(__file__).with_name("fake_codex.py")
NEW_THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"
PRICES = {"default": {"input": "2", "cached_input": "0.5", "output": "8"}}


@pytest.fixture
def codex(tmp_path, settings, monkeypatch):
    """Point WORKER_CODEX_BINARY at an executable wrapper around fake_codex.py."""
    binary = tmp_path / "bin" / "codex"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    binary.chmod(0o755)
    log = tmp_path / "codex-calls.jsonl"
    settings.WORKER_CODEX_BINARY = str(binary)
    settings.WORKER_CODEX_WORKDIR = str(tmp_path / "work")
    settings.WORKER_CODEX_SANDBOX = "workspace-write"
    settings.WORKER_CODEX_MODEL = ""
    settings.WORKER_CODEX_PRICES = PRICES
    monkeypatch.setenv("FAKE_CODEX_LOG", str(log))
    monkeypatch.delenv("FAKE_CODEX_MODE", raising=False)

    class Fake:
        def calls(self):
            if not log.exists():
                return []
            return [json.loads(line) for line in log.read_text().splitlines()]

        def mode(self, value):
            monkeypatch.setenv("FAKE_CODEX_MODE", value)

    return Fake()


def _request(**fields):
    values = {"task_id": 5, "project_id": 1, "user_id": 1, "prompt": "Fix the login bug"}
    return ExecutionRequest(**{**values, **fields})


def test_a_first_turn_runs_codex_exec_json_with_the_prompt_on_stdin(codex, settings, tmp_path):
    settings.WORKER_CODEX_MODEL = "gpt-5-codex"

    CodexExecutor().execute(_request(), control=ExecutionControl())

    [call] = codex.calls()
    workdir = str(tmp_path / "work" / "task-5")
    assert call["argv"] == [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-C",
        workdir,
        "--sandbox",
        "workspace-write",
        "-m",
        "gpt-5-codex",
        "-",
    ]
    assert call["stdin"] == "Fix the login bug"
    assert call["cwd"] == workdir


def test_it_reads_the_result_thread_cost_and_events_and_skips_malformed_lines(codex, caplog):
    with caplog.at_level(logging.WARNING, logger="worker.executors.codex"):
        result = CodexExecutor().execute(_request(), control=ExecutionControl())

    assert result.status == "completed"
    assert result.result_text == "Done: Fix the login bug"
    assert result.thread_id == NEW_THREAD
    # 600k uncached input at $2 + 400k cached at $0.50 + 100k output at $8, per million.
    assert result.cost_usd == Decimal("2.200000")
    assert [event.kind for event in result.events] == ["mcp_tool_call", "web_search"]
    mcp = result.events[0].data
    assert (mcp["server"], mcp["tool"], mcp["status"]) == ("docs", "search", "completed")
    assert result.events[1].data["query"] == "django session expiry"
    assert caplog.text.count("skipped a malformed event line") == 3


def test_a_later_turn_resumes_the_thread(codex):
    request = _request(turn=2, thread_id="th-77", continuation_prompt="Now add a test")

    result = CodexExecutor().execute(request, control=ExecutionControl())

    [call] = codex.calls()
    assert call["argv"][-4:] == ["workspace-write", "resume", "th-77", "-"]
    assert call["stdin"] == "Now add a test"
    assert result.thread_id == "th-77"
    assert result.result_text == "Done: Now add a test"


def test_a_checkpoint_resume_with_a_known_thread_resumes_it(codex):
    CodexExecutor().execute(_request(is_resume=True, thread_id="th-5"), control=ExecutionControl())
    [call] = codex.calls()
    assert call["argv"][-3:] == ["resume", "th-5", "-"]


def test_a_crash_fails_the_turn_with_the_stderr_tail(codex):
    codex.mode("crash")

    result = CodexExecutor().execute(_request(), control=ExecutionControl())

    assert result.status == "failed"
    assert result.failure_reason.startswith("codex exit status 101: thread 'main' panicked")
    assert result.failure_reason.endswith("stream disconnected before completion")
    assert result.thread_id == NEW_THREAD  # kept: a later turn can resume the thread
    assert [event.kind for event in result.events] == ["mcp_tool_call", "web_search"]


def test_a_failed_turn_fails_with_codex_s_message(codex):
    codex.mode("turn_failed")

    result = CodexExecutor().execute(_request(), control=ExecutionControl())

    assert result.status == "failed"
    assert "usage limit reached" in result.failure_reason


def test_a_missing_binary_fails_the_turn(settings, tmp_path):
    settings.WORKER_CODEX_BINARY = str(tmp_path / "no-such-codex")
    settings.WORKER_CODEX_WORKDIR = str(tmp_path / "work")
    result = CodexExecutor().execute(_request(), control=ExecutionControl())
    assert result.status == "failed"
    assert "could not start codex" in result.failure_reason


def test_the_worker_stores_codex_results_events_and_resumes_the_next_turn(
    codex, project, task_factory, worker_factory
):
    task = task_factory(project, prompt="Fix the login bug")
    worker = worker_factory(CodexExecutor())

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.result_text == "Done: Fix the login bug"
    assert task.thread_id == NEW_THREAD
    assert task.cost_usd == Decimal("2.2")
    assert list(TaskEvent.objects.filter(task=task).values_list("turn", "kind")) == [
        (1, "mcp_tool_call"),
        (1, "web_search"),
    ]

    task.status, task.turn, task.continuation_prompt = TaskStatus.QUEUED, 2, "Add a test"
    task.save()
    worker.run_once()

    task.refresh_from_db()
    assert task.result_text == "Done: Add a test"
    assert task.cost_usd == Decimal("4.4")
    assert codex.calls()[1]["argv"][-3:] == ["resume", NEW_THREAD, "-"]
    assert TaskEvent.objects.filter(task=task, turn=2).count() == 2


def test_a_crashed_run_keeps_its_thread_for_the_next_turn(
    codex, project, task_factory, worker_factory
):
    codex.mode("crash")
    task = task_factory(project)

    worker_factory(CodexExecutor()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert "panicked" in task.failure_reason
    assert task.thread_id == NEW_THREAD
    assert TaskRun.objects.get(task=task).outcome == "failed"


def test_the_thread_id_is_recorded_while_the_turn_runs(
    codex, project, task_factory, worker_factory
):
    task = task_factory(project)
    seen = []
    worker = worker_factory(CodexExecutor())
    real = worker._execute

    def spy(request):
        result = real(request)
        seen.append(type(task).objects.get(pk=task.pk).thread_id)
        return result

    worker._execute = spy
    worker.run_once()
    assert seen == [NEW_THREAD]  # stored before the result was


@pytest.mark.parametrize(
    ("usage", "model", "expected"),
    [
        (Usage(1_000_000, 0, 0), "gpt-x", Decimal("2.000000")),
        (Usage(1_000_000, 1_000_000, 0), "gpt-x", Decimal("0.500000")),
        (Usage(0, 0, 1_000), "gpt-x", Decimal("0.008000")),
        (Usage(1_000_000, 0, 0), "cheap", Decimal("0.100000")),
    ],
)
def test_usage_is_priced_per_million_tokens(usage, model, expected):
    prices = {**PRICES, "cheap": {"input": "0.1", "cached_input": "0.01", "output": "0.4"}}
    assert usage_price(usage=usage, model=model, prices=prices) == expected


def test_no_price_at_all_counts_zero():
    assert usage_price(usage=Usage(10, 0, 10), model="x", prices={}) == Decimal("0")


def test_the_stream_sums_usage_and_keeps_the_last_message():
    stream = CodexStream()
    for line in [
        '{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"one"}}',
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,'
        '"output_tokens":2}}',
        '{"type":"item.completed","item":{"id":"b","type":"agent_message","text":"two"}}',
        '{"type":"turn.completed","usage":{"input_tokens":"bad","output_tokens":3}}',
        "",
    ]:
        stream.feed(line)
    assert stream.last_message == "two"
    assert stream.usage == Usage(10, 4, 5)
    assert stream.malformed_lines == 0
