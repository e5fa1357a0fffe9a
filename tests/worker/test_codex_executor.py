"""The `codex` executor (`worker.codex`) against a fake `codex` binary that prints a realistic
event stream."""

import gzip
import json
import logging
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from controlplane.models import TaskEvent, TaskStatus
from worker.checks import worker_settings_check
from worker.codex import CodexExecutor
from worker.codex.stream import CodexStream, stderr_reason
from worker.executors import ExecutionControl, ExecutionRequest
from worker.executors.base import TokenUsage
from worker.models import CodexSession, TaskRun

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
    home = tmp_path / "codex-home"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    for name in ("FAKE_CODEX_USAGE", "FAKE_CODEX_TURN_USAGE", "FAKE_CODEX_SESSION_FILE"):
        monkeypatch.delenv(name, raising=False)
    settings.WORKER_CODEX_BINARY = str(binary)
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    # The fake reads its script, writes its log, and is told how to behave by these names:
    # shown to it as an operator would show an agent's own files and settings.
    settings.WORKER_SANDBOX_READ_ONLY = [str(FAKE.parent)]
    settings.WORKER_SANDBOX_WRITABLE = [str(log.parent)]
    settings.WORKER_AGENT_ENV = [
        "FAKE_CODEX_LOG",
        "FAKE_CODEX_MODE",
        "FAKE_CODEX_USAGE",
        "FAKE_CODEX_TURN_USAGE",
        "FAKE_CODEX_SESSION_FILE",
    ]
    settings.WORKER_CODEX_SANDBOX = "workspace-write"
    settings.WORKER_CODEX_MODEL = ""
    settings.WORKER_CODEX_PRICES = PRICES
    settings.WORKER_CODEX_RESUME_USAGE = "per_turn"  # what the fake reports unless told
    monkeypatch.setenv("FAKE_CODEX_LOG", str(log))
    monkeypatch.delenv("FAKE_CODEX_MODE", raising=False)

    class Fake:
        def calls(self):
            if not log.exists():
                return []
            return [json.loads(line) for line in log.read_text().splitlines()]

        def mode(self, value):
            monkeypatch.setenv("FAKE_CODEX_MODE", value)

        def usage(self, value):
            """Make the fake report `value` usage on resume, and the setting say so."""
            monkeypatch.setenv("FAKE_CODEX_USAGE", value)
            settings.WORKER_CODEX_RESUME_USAGE = value

        def turn_usage(self, **counts):
            monkeypatch.setenv("FAKE_CODEX_TURN_USAGE", json.dumps(counts))

        def session_file(self):
            monkeypatch.setenv("FAKE_CODEX_SESSION_FILE", "1")

        home = tmp_path / "codex-home"

    return Fake()


def _request(**fields):
    values = {"task_id": 5, "project_id": 1, "user_id": 1, "prompt": "Fix the login bug"}
    return ExecutionRequest(**{**values, **fields})


def test_a_first_turn_runs_codex_exec_json_with_the_prompt_on_stdin(codex, settings, tmp_path):
    settings.WORKER_CODEX_MODEL = "gpt-5-codex"

    CodexExecutor().execute(_request(), control=ExecutionControl())

    [call] = codex.calls()
    workdir = str(tmp_path / "tasks" / "task-5" / "work")
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
    with caplog.at_level(logging.WARNING, logger="worker.codex"):
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
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
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


def test_three_turns_through_the_worker_cost_three_turns_when_codex_reports_thread_totals(
    codex, project, task_factory, worker_factory
):
    codex.usage("cumulative")
    task = task_factory(project, prompt="Fix the login bug")
    worker = worker_factory(CodexExecutor())
    worker.run_once()
    for turn in (2, 3):
        task.refresh_from_db()
        task.status, task.turn, task.continuation_prompt = TaskStatus.QUEUED, turn, "More"
        task.save()
        worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.cost_usd == Decimal("6.6")  # not 2.2 + 4.4 + 6.6


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


TURN = TokenUsage(
    input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000
)  # what fake_codex reports for one turn: $2.20 at PRICES


def test_the_stream_sums_usage_and_keeps_the_last_message():
    stream = CodexStream()
    for line in [
        '{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"one"}}',
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,'
        '"cache_write_input_tokens":3,"output_tokens":2,"reasoning_output_tokens":1}}',
        '{"type":"item.completed","item":{"id":"b","type":"agent_message","text":"two"}}',
        '{"type":"turn.completed","usage":{"input_tokens":"bad","output_tokens":3}}',
        "",
    ]:
        stream.feed(line)
    assert stream.last_message == "two"
    assert stream.usage == TokenUsage(10, 4, 3, 5, 1)
    assert stream.malformed_lines == 0


def test_an_error_item_is_a_warning_not_a_failure(codex):
    result = CodexExecutor().execute(_request(), control=ExecutionControl())
    assert result.status == "completed"
    stream = CodexStream()
    stream.feed('{"type":"item.completed","item":{"id":"i","type":"error","message":"slow"}}')
    assert stream.warnings == ["slow"]
    assert stream.failure_detail() == ""


def test_a_web_search_item_with_two_ids_keeps_the_first_and_the_other_aside(codex):
    result = CodexExecutor().execute(_request(), control=ExecutionControl())
    search = result.events[1].data
    assert search["id"] == "item_4"
    assert search["duplicate_keys"] == {"id": ["ws_91"]}
    assert search["query"] == "django session expiry"


# --- A turn's own usage -----------------------------------------------------------------------


def _turns(codex, count, *, thread_usage_known=True):
    """Run a first turn and `count - 1` resumed turns; each result as the executor gave it."""
    results = [CodexExecutor().execute(_request(), control=ExecutionControl())]
    recorded = results[0].usage
    for turn in range(2, count + 1):
        request = _request(
            turn=turn,
            thread_id=results[0].thread_id,
            continuation_prompt=f"turn {turn}",
            thread_usage=recorded if thread_usage_known else None,
        )
        results.append(CodexExecutor().execute(request, control=ExecutionControl()))
        recorded = recorded + results[-1].usage
    return results


def test_per_turn_reports_are_billed_as_they_are(codex):
    codex.usage("per_turn")
    results = _turns(codex, 3)
    assert [r.usage for r in results] == [TURN, TURN, TURN]
    assert [r.cost_usd for r in results] == [Decimal("2.2")] * 3


def test_cumulative_reports_on_resume_are_billed_less_the_thread_s_recorded_total(codex):
    codex.usage("cumulative")
    results = _turns(codex, 3)
    assert [r.usage for r in results] == [TURN, TURN, TURN]
    assert sum(r.cost_usd for r in results) == Decimal("6.6")


def test_auto_reads_a_report_that_covers_the_recorded_total_as_cumulative(codex, settings):
    codex.usage("cumulative")
    settings.WORKER_CODEX_RESUME_USAGE = "auto"
    assert [r.usage for r in _turns(codex, 3)] == [TURN, TURN, TURN]


def test_a_resumed_thread_with_no_recorded_usage_is_billed_the_whole_report(codex, caplog):
    codex.usage("cumulative")
    with caplog.at_level(logging.WARNING, logger="worker.codex"):
        results = _turns(codex, 2, thread_usage_known=False)
    assert results[1].usage == TURN + TURN  # an upper bound, never less than was spent
    assert "no recorded earlier usage" in caplog.text


def test_the_cli_s_session_file_decides_whatever_the_ledger_knows(codex, settings):
    codex.usage("cumulative")
    codex.session_file()
    settings.WORKER_CODEX_PRICES = {**PRICES, "gpt-5-mini": {"input": "1", "output": "1"}}
    results = _turns(codex, 3, thread_usage_known=False)
    assert [r.usage for r in results] == [TURN, TURN, TURN]
    # no WORKER_CODEX_MODEL: the model the session file names is priced
    assert [r.model for r in results] == ["gpt-5-mini"] * 3
    assert [r.cost_usd for r in results] == [Decimal("1.1")] * 3


def test_a_checkpoint_resume_on_a_thread_with_a_session_file_bills_only_itself(codex):
    codex.usage("cumulative")
    codex.session_file()
    first = CodexExecutor().execute(_request(), control=ExecutionControl())
    resume = _request(is_resume=True, thread_id=first.thread_id)
    again = CodexExecutor().execute(resume, control=ExecutionControl())
    assert again.usage == TURN
    assert again.thread_id == first.thread_id


# --- Failure reasons --------------------------------------------------------------------------


def test_a_failed_turn_names_the_turn_failed_event_not_stderr_noise(codex):
    codex.mode("turn_failed")
    result = CodexExecutor().execute(_request(), control=ExecutionControl())
    assert result.failure_reason == "codex exit status 1: usage limit reached"


def test_without_a_failure_event_stderr_is_used_without_the_cli_s_noise(codex):
    codex.mode("stderr_only")
    result = CodexExecutor().execute(_request(), control=ExecutionControl())
    assert result.failure_reason == (
        "codex exit status 1: Error: thread/resume: no rollout found for thread id th-9"
    )


def test_the_last_error_event_is_the_reason_when_no_turn_failed_came():
    stream = CodexStream()
    stream.feed('{"type":"error","message":"Reconnecting... 1/5"}')
    stream.feed('{"type":"error","message":"stream disconnected: 500"}')
    assert stream.failure_detail() == "stream disconnected: 500"
    stream.feed('{"type":"turn.failed","error":{"message":"model overloaded"}}')
    assert stream.failure_detail() == "model overloaded"


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        ("WARNING: proceeding, even though we could not create PATH aliases: x\n", ""),
        ("2026-11-30T16:03:30.719050Z ERROR codex_core::tools::router: error=x\n", ""),
        ("2026-11-30T16:03:30Z  WARN codex_exec: slow\nreal problem\n", "real problem"),
        ("Error: bad config\n\nStack backtrace:\n   0: <unknown>\n", "Error: bad config"),
        ("thread 'main' panicked at x.rs:1:\nboom\n", "thread 'main' panicked at x.rs:1:\nboom"),
    ],
)
def test_stderr_noise_is_left_out(stderr, expected):
    assert stderr_reason(stderr) == expected


# --- Settings checks --------------------------------------------------------------------------


def test_codex_settings_are_checked(settings):
    def ids():
        return [problem.id for problem in worker_settings_check()]

    assert ids() == []
    settings.WORKER_CODEX_RESUME_USAGE = "sometimes"
    assert ids() == ["worker.W004"]
    settings.WORKER_CODEX_RESUME_USAGE = "auto"
    settings.WORKER_CODEX_PRICES = {"default": {"input": "x", "outptu": 1}, "m": []}
    # a bad input rate, a misspelt rate (so output is missing: billed at 0), a non-table
    messages = [problem.msg for problem in worker_settings_check()]
    assert ids() == ["worker.W005"] * 4
    assert any("lacks output" in message for message in messages)
    settings.WORKER_CODEX_PRICES = "cheap"
    assert ids() == ["worker.W005"]


def test_links_an_agent_plants_in_its_codex_home_are_never_followed(
    codex, settings, tmp_path, project, task_factory, worker_factory
):
    """A hijacked agent links its session file to the worker's database and its config file
    to a file of the control plane: the worker neither stores the one nor overwrites the
    other, and the next turn gets a real copy of the configuration."""
    codex.session_file()
    secret = tmp_path / "controlplane.sqlite3"
    secret.write_text("SQLite format 3 the worker's database")
    victim = tmp_path / "settings.py"
    victim.write_text("SECRET_KEY = 'left alone'")
    (tmp_path / "codex-home" / "config.toml").write_text('model = "worker-config"\n')
    plant = tmp_path / "bin" / "codex"
    plant.write_text(
        "#!/bin/sh\n"
        f'{sys.executable} {FAKE} "$@"; status=$?\n'
        'for f in "$CODEX_HOME"/sessions/*/*/*/rollout-*.jsonl; do\n'
        f'  ln -sf {secret} "$f"\ndone\n'
        f'ln -sf {victim} "$CODEX_HOME/config.toml"\n'
        "exit $status\n"
    )
    task = task_factory(project, prompt="Fix the login bug")
    worker = worker_factory(CodexExecutor())

    worker.run_once()
    task.refresh_from_db()
    task.status, task.turn, task.continuation_prompt = TaskStatus.QUEUED, 2, "Again"
    task.save()
    worker.run_once()

    assert victim.read_text() == "SECRET_KEY = 'left alone'"
    home = Path(settings.WORKER_TASK_ROOT) / f"task-{task.pk}" / "home" / ".codex"
    for record in CodexSession.objects.all():
        stored = gzip.decompress(bytes(record.data or b""))
        assert b"the worker's database" not in stored
    assert not any(path.is_symlink() for path in (home / "sessions").rglob("*"))
