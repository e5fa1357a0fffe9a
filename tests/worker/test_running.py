"""Running a claimed task: turns, goals, quota refusal, results, costs, ownership."""

from decimal import Decimal

from controlplane.models import AuditEvent, Quota, TaskEvent, TaskStatus
from worker.executors import ExecutionResult, TaskEventData
from worker.models import TaskRun


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
    task_factory(project, user=alice, completed=True, cost_usd=Decimal("10.50"))
    task = task_factory(project, user=alice)

    worker_factory(spy_executor).run_once()

    task.refresh_from_db()
    assert spy_executor.requests == []
    assert task.failure_reason == (
        "monthly quota exhausted: 0% of $10.00 left (spent $10.50 this month)"
    )


def test_an_unlimited_user_runs(project, task_factory, worker, alice):
    Quota.objects.create(user=alice, monthly_limit_usd=None)
    task_factory(project, user=alice, completed=True, cost_usd=Decimal("500"))
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
