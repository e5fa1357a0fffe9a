"""The auto-memory hooks: injection before the run (in memory only), the sweep after a round."""

import logging

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
    assert task.injected_memory_ids == []
    assert "memory injection failed" in caplog.text


def test_the_sweep_runs_at_the_end_of_every_round(worker, memory_hooks, project, task_factory):
    worker.run_round()
    task_factory(project)
    worker.run_round()
    assert memory_hooks.sweeps == 2


def test_a_failing_sweep_is_logged_and_the_worker_goes_on(
    project, task_factory, worker, memory_hooks, caplog
):
    memory_hooks.sweep_error = RuntimeError("sweep broke")
    first = task_factory(project)

    with caplog.at_level(logging.ERROR, logger="worker.loop"):
        worker.run_round()
    second = task_factory(project)
    worker.run_round()

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (TaskStatus.COMPLETED, TaskStatus.COMPLETED)
    assert "memory sweep failed" in caplog.text
    assert "RuntimeError: sweep broke" in caplog.text  # with its traceback


def test_the_real_hooks_not_being_ready_does_not_stop_a_task(
    project, task_factory, worker, monkeypatch
):
    def not_ready(**kwargs):
        raise NotImplementedError

    monkeypatch.setattr("automemory.services.injector.inject_memories", not_ready)
    monkeypatch.setattr("automemory.services.extractor.process_auto_memories", not_ready)
    task = task_factory(project)

    worker.run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
