"""Running a claimed task: turns, goals, quota refusal, results, costs, ownership."""

import signal
from datetime import UTC, datetime
from decimal import Decimal

from django.utils import timezone
from freezegun import freeze_time

from controlplane.models import AuditEvent, MonthlySpend, Quota, TaskEvent, TaskStatus, UsageRecord
from controlplane.services.quota import quota_status_get
from controlplane.services.usage import usage_record
from worker.executors import ExecutionResult, TaskEventData
from worker.executors.base import TokenUsage
from worker.models import TaskRun


def spend(task, amount: str) -> None:
    """A finished run of `task` that cost `amount` (a usage ledger row)."""
    usage_record(
        user_id=task.user_id,
        task_id=task.pk,
        project_id=task.project_id,
        turn=task.turn,
        cost_usd=Decimal(amount),
        finished_at=timezone.now(),
    )


def test_it_runs_the_prompt_of_a_first_turn(project, task_factory, worker):
    task = task_factory(project, prompt="Fix the login bug")

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.result_text == "Fix the login bug"
    assert task.started_at <= task.finished_at
    assert task.cost_usd == 0
    assert task.executor == "echo"


def test_a_goal_task_runs_its_goal(project, task_factory, worker):
    task = task_factory(project, prompt="context", goal="Make the tests pass")

    worker.run_once()

    task.refresh_from_db()
    assert task.result_text == "Make the tests pass"


def test_a_continuation_runs_the_continuation_prompt(project, task_factory, worker):
    task = task_factory(project, prompt="Fix the login bug", goal="Login works")
    worker.run_once()
    # What POST /tasks/{id}/continue does to the row.
    task.refresh_from_db()
    task.status = TaskStatus.QUEUED
    task.turn = 2
    task.continuation_prompt = "Now add a regression test"
    task.is_resume = False
    task.save()

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.turn == 2
    assert task.result_text == "Now add a regression test"
    assert task.prompt == "Fix the login bug"
    assert list(TaskRun.objects.filter(task=task).values_list("turn", flat=True)) == [1, 2]


def test_the_executor_gets_the_whole_turn_in_its_request(
    project, task_factory, worker_factory, spy_executor
):
    parent = task_factory(project, kind="coordinator", completed=True)
    task = task_factory(
        project,
        prompt="p",
        goal="g",
        turn=2,
        continuation_prompt="c",
        thread_id="th-1",
        parent_task=parent,
    )

    worker_factory(spy_executor).run_once()

    [request] = spy_executor.requests
    assert (request.task_id, request.project_id, request.user_id) == (
        task.pk,
        project.pk,
        task.user_id,
    )
    assert (request.prompt, request.goal, request.turn, request.thread_id) == ("p", "g", 2, "th-1")
    assert request.continuation_prompt == "c"
    assert request.parent_task_id == parent.pk
    assert request.is_resume is False
    assert request.text == "c"


def test_coordinator_tasks_run_like_others(project, task_factory, worker):
    task = task_factory(project, kind="coordinator", prompt="split the work")
    worker.run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED


def test_a_user_without_quota_gets_the_task_failed_and_nothing_runs(
    project, task_factory, worker_factory, spy_executor, alice
):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))
    task = task_factory(project, user=alice)

    report = worker_factory(spy_executor).run_once()

    assert spy_executor.requests == []
    assert [run.outcome for run in report.runs] == ["refused"]
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith("monthly quota exhausted: 0% of $0.00 left")
    assert task.finished_at is not None
    assert task.result_text == ""
    assert AuditEvent.objects.filter(action="worker_task_refused", target_id=str(task.pk)).exists()


def test_spending_the_default_limit_exhausts_the_quota(
    project, task_factory, worker_factory, spy_executor, alice, settings
):
    settings.CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD = Decimal("10")
    spend(task_factory(project, user=alice, completed=True), "10.50")
    task = task_factory(project, user=alice)

    worker_factory(spy_executor).run_once()

    task.refresh_from_db()
    assert spy_executor.requests == []
    assert task.failure_reason == (
        "monthly quota exhausted: 0% of $10.00 left (spent $10.50 this month)"
    )


def test_an_unlimited_user_runs(project, task_factory, worker, alice):
    Quota.objects.create(user=alice, monthly_limit_usd=None)
    spend(task_factory(project, user=alice, completed=True), "500")
    task = task_factory(project, user=alice)

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED


def test_a_failed_turn_keeps_its_reason_and_adds_its_cost(project, task_factory, worker_factory):
    task = task_factory(project, cost_usd=Decimal("1.25"))
    executor = _Fixed(ExecutionResult.failed("exit status 2: boom", cost_usd=Decimal("0.5")))

    worker_factory(executor).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "exit status 2: boom"
    assert task.cost_usd == Decimal("1.75")
    assert task.finished_at is not None


def test_events_and_thread_id_are_stored(project, task_factory, worker_factory):
    task = task_factory(project)
    executor = _Fixed(
        ExecutionResult(
            status="completed",
            result_text="ok",
            thread_id="th-9",
            events=[
                TaskEventData(kind="mcp_tool_call", data={"server": "docs", "tool": "search"}),
                TaskEventData(kind="web_search", data={"query": "django"}),
            ],
        )
    )

    worker_factory(executor).run_once()

    task.refresh_from_db()
    assert task.thread_id == "th-9"
    events = list(TaskEvent.objects.filter(task=task).values_list("turn", "kind", "data"))
    assert events == [
        (1, "mcp_tool_call", {"server": "docs", "tool": "search"}),
        (1, "web_search", {"query": "django"}),
    ]


def test_an_executor_that_raises_fails_the_task(project, task_factory, worker_factory):
    task = task_factory(project)

    class Broken:
        name = "broken"

        def execute(self, request, *, control):
            raise RuntimeError("disk full")

    worker_factory(Broken()).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert "RuntimeError: disk full" in task.failure_reason


def test_a_task_taken_away_while_running_is_not_overwritten(project, task_factory, worker_factory):
    task = task_factory(project)

    def taken_away(request, control):
        type(task).objects.filter(pk=request.task_id).update(worker_id="someone-else")

    from tests.worker.conftest import SpyExecutor

    report = worker_factory(SpyExecutor(action=taken_away)).run_once()

    assert [run.outcome for run in report.runs] == ["discarded"]
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING
    assert task.worker_id == "someone-else"
    assert task.result_text == ""


class _Fixed:
    name = "fixed"

    def __init__(self, result):
        self.result = result

    def execute(self, request, *, control):
        return self.result


# --- The usage ledger -------------------------------------------------------------------------


class _Turns:
    """Returns the next of `results` on each call; records the requests."""

    name = "turns"

    def __init__(self, *results):
        self.results = list(results)
        self.requests = []

    def execute(self, request, *, control):
        self.requests.append(request)
        return self.results.pop(0)


def _priced(cost: str, *, thread: str = "th-1", tokens: int = 100, **fields) -> ExecutionResult:
    usage = TokenUsage(
        input_tokens=tokens,
        cached_input_tokens=tokens // 2,
        cache_write_input_tokens=tokens // 10,
        output_tokens=tokens // 4,
        reasoning_output_tokens=tokens // 8,
    )
    return ExecutionResult(
        status="completed",
        result_text="ok",
        cost_usd=Decimal(cost),
        thread_id=thread,
        usage=usage,
        model="gpt-test",
        **fields,
    )


def _continue(task, prompt="next"):
    """What POST /tasks/{id}/continue does to the row."""
    task.refresh_from_db()
    task.status = TaskStatus.QUEUED
    task.turn += 1
    task.continuation_prompt = prompt
    task.save()


def test_each_turn_is_one_ledger_row_and_the_task_costs_their_sum(
    project, task_factory, worker_factory, alice
):
    task = task_factory(project, user=alice)
    executor = _Turns(_priced("0.0018"), _priced("0.002", tokens=200), _priced("0.0016"))
    worker = worker_factory(executor)

    worker.run_once()
    _continue(task)
    worker.run_once()
    _continue(task)
    worker.run_once()

    task.refresh_from_db()
    rows = list(
        UsageRecord.objects.filter(task=task).values_list(
            "kind", "turn", "cost_usd", "input_tokens", "model", "executor", "thread_id"
        )
    )
    assert rows == [
        ("task_run", 1, Decimal("0.0018"), 100, "gpt-test", "turns", "th-1"),
        ("task_run", 2, Decimal("0.002"), 200, "gpt-test", "turns", "th-1"),
        ("task_run", 3, Decimal("0.0016"), 100, "gpt-test", "turns", "th-1"),
    ]
    assert task.cost_usd == Decimal("0.0054")
    month = MonthlySpend.objects.get(user=alice)
    assert (month.total_usd, month.entries) == (Decimal("0.0054"), 3)
    assert quota_status_get(user_id=alice.pk).spent_usd == Decimal("0.0054")


def test_a_run_records_all_five_token_counts(project, task_factory, worker_factory):
    task = task_factory(project)

    worker_factory(_Turns(_priced("0.01", tokens=800))).run_once()

    row = UsageRecord.objects.get(task=task)
    assert (
        row.input_tokens,
        row.cached_input_tokens,
        row.cache_write_input_tokens,
        row.output_tokens,
        row.reasoning_output_tokens,
    ) == (800, 400, 80, 200, 100)
    assert row.finished_at == task.__class__.objects.get(pk=task.pk).finished_at
    assert row.project_id == project.pk


def test_a_failed_run_is_recorded_with_its_cost(project, task_factory, worker_factory):
    task = task_factory(project)
    failed = ExecutionResult.failed("model error", cost_usd=Decimal("0.25"), model="gpt-test")

    worker_factory(_Fixed(failed)).run_once()

    assert list(UsageRecord.objects.filter(task=task).values_list("cost_usd", "model")) == [
        (Decimal("0.25"), "gpt-test")
    ]


def test_an_echo_run_is_recorded_at_zero_cost(project, task_factory, worker):
    task = task_factory(project)

    worker.run_once()

    assert list(UsageRecord.objects.filter(task=task).values_list("turn", "cost_usd")) == [
        (1, Decimal("0"))
    ]


def test_a_refused_run_records_nothing(project, task_factory, worker_factory, alice):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))
    task = task_factory(project, user=alice)

    worker_factory(_Turns(_priced("1"))).run_once()

    assert not UsageRecord.objects.filter(task=task).exists()
    assert not MonthlySpend.objects.exists()


def test_a_requeued_run_records_nothing(project, task_factory, worker_factory):
    task = task_factory(project)

    class StoppedAtOnce:
        name = "stopped"

        def execute(self, request, *, control):
            worker.handle_signal(signal.SIGTERM)
            worker.handle_signal(signal.SIGINT)
            return _priced("1")

    worker = worker_factory(StoppedAtOnce())
    worker.run_forever()

    task.refresh_from_db()
    assert task.status == TaskStatus.QUEUED
    assert not UsageRecord.objects.exists()
    assert task.cost_usd == 0


def test_the_next_turn_gets_the_threads_recorded_usage(project, task_factory, worker_factory):
    task = task_factory(project)
    executor = _Turns(_priced("0.1", tokens=100), _priced("0.2", tokens=200), _priced("0.1"))
    worker = worker_factory(executor)

    worker.run_once()
    _continue(task)
    worker.run_once()
    _continue(task)
    worker.run_once()

    first, second, third = (request.thread_usage for request in executor.requests)
    assert first is None
    assert second == TokenUsage(100, 50, 10, 25, 12)
    assert third == TokenUsage(300, 150, 30, 75, 37)


def test_runs_of_another_thread_or_carried_over_are_not_the_threads_usage(
    project, task_factory, worker_factory
):
    task = task_factory(project, thread_id="th-new")
    usage_record(
        user_id=task.user_id,
        task_id=task.pk,
        thread_id="th-old",
        input_tokens=500,
        cost_usd=Decimal("1"),
        finished_at=timezone.now(),
    )
    usage_record(  # a row carried over from before the ledger: no thread, no tokens
        user_id=task.user_id, task_id=task.pk, cost_usd=Decimal("2"), finished_at=timezone.now()
    )
    executor = _Turns(_priced("0.1", thread="th-new"))

    worker_factory(executor).run_once()

    assert executor.requests[0].thread_usage is None


def test_a_task_created_last_month_and_continued_this_month_spends_this_month(
    project, task_factory, worker_factory, alice
):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("10"))
    with freeze_time("2026-03-31 23:00:00", tz_offset=0):
        task = task_factory(project, user=alice)
        worker = worker_factory(_Turns(_priced("0.5"), _priced("9"), _priced("1")))
        worker.run_once()
    with freeze_time("2026-04-01 00:30:00", tz_offset=0):
        _continue(task)
        worker.run_once()
        april = quota_status_get(user_id=alice.pk)
        other = task_factory(project, user=alice)
        report = worker.run_once()

    assert april.spent_usd == Decimal("9")
    assert april.remaining_percent == Decimal("10")
    march = quota_status_get(user_id=alice.pk, now=datetime(2026, 3, 15, tzinfo=UTC))
    assert march.spent_usd == Decimal("0.5")
    task.refresh_from_db()
    assert task.cost_usd == Decimal("9.5")
    assert [run.outcome for run in report.runs] == ["completed"]
    other.refresh_from_db()
    assert other.status == TaskStatus.COMPLETED


def test_a_continuation_that_spends_the_month_refuses_the_next_task(
    project, task_factory, worker_factory, alice
):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("10"))
    with freeze_time("2026-03-31 23:00:00", tz_offset=0):
        task = task_factory(project, user=alice)
        worker = worker_factory(_Turns(_priced("9.5"), _priced("10"), _priced("1")))
        worker.run_once()
    with freeze_time("2026-04-01 00:30:00", tz_offset=0):
        _continue(task)
        worker.run_once()
        other = task_factory(project, user=alice)
        worker.run_once()

    other.refresh_from_db()
    assert other.status == TaskStatus.FAILED
    assert other.failure_reason == (
        "monthly quota exhausted: 0% of $10.00 left (spent $10.00 this month)"
    )
