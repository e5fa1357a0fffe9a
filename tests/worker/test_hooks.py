"""The auto-memory hooks: injection before the run (in memory only); the sweep beside the rounds,
never inside one (only `--once` sweeps inline, after its tasks)."""

import logging

from automemory.models import task_injected_ids
from controlplane.models import TaskStatus

PREFIX = "Past memories, for reference only:\n- use pytest\n\n"


def test_injected_memories_reach_the_executor_but_not_the_stored_prompt(
    project, task_factory, worker, memory_hooks
):
    memory_hooks.prefix = PREFIX
    memory_hooks.memory_ids = [7, 3]
    task = task_factory(project, prompt="Fix the login bug")

    worker.run_once()

    task.refresh_from_db()
    assert task.result_text == PREFIX + "Fix the login bug"
    assert task.prompt == "Fix the login bug"


def test_a_goal_task_gets_the_memories_in_front_of_its_goal(
    project, task_factory, worker, memory_hooks
):
    memory_hooks.prefix = PREFIX
    task = task_factory(project, prompt="p", goal="Ship the feature")

    worker.run_once()

    task.refresh_from_db()
    assert task.result_text == PREFIX + "Ship the feature"
    assert task.goal == "Ship the feature"


def test_the_injector_is_asked_with_the_stored_prompt_and_goal(
    project, task_factory, worker, memory_hooks
):
    task = task_factory(project, prompt="p", goal="g")
    worker.run_once()
    assert memory_hooks.inject_calls == [{"task_id": task.pk, "prompt": "p", "goal": "g"}]


def test_a_failing_injector_leaves_the_task_running_without_memories(
    project, task_factory, worker, memory_hooks, caplog
):
    memory_hooks.inject_error = RuntimeError("memory table is gone")
    task = task_factory(project, prompt="Fix the login bug")

    with caplog.at_level(logging.WARNING, logger="worker.loop"):
        worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert task.result_text == "Fix the login bug"
    assert task_injected_ids(task) == []
    assert "memory injection failed" in caplog.text


def test_a_round_never_sweeps(worker, memory_hooks, project, task_factory):
    worker.run_round()
    task_factory(project)
    worker.run_round()
    assert memory_hooks.sweeps == 0


def test_run_once_sweeps_once_after_its_tasks_and_lets_go_of_the_lease(
    worker, memory_hooks, project, task_factory
):
    task_factory(project)
    worker.run_once()
    assert (memory_hooks.sweeps, memory_hooks.releases) == (1, 1)


def test_a_failing_sweep_is_logged_and_the_worker_goes_on(
    project, task_factory, worker, memory_hooks, caplog
):
    memory_hooks.sweep_error = RuntimeError("sweep broke")
    first = task_factory(project)

    with caplog.at_level(logging.ERROR, logger="worker.loop"):
        worker.run_once()
    second = task_factory(project)
    worker.run_once()

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (TaskStatus.COMPLETED, TaskStatus.COMPLETED)
    assert "memory sweep failed" in caplog.text
    assert "RuntimeError: sweep broke" in caplog.text  # with its traceback


def test_the_real_hooks_not_being_ready_does_not_stop_a_task(
    project, task_factory, worker_factory, monkeypatch
):
    def not_ready(**kwargs):
        raise NotImplementedError

    monkeypatch.setattr("automemory.services.injector.inject_memories", not_ready)
    monkeypatch.setattr(
        "automemory.services.extraction.sweep.GlobalSweeper.sweep", lambda self, **kw: not_ready()
    )
    task = task_factory(project)

    worker_factory(sweeper=None).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
