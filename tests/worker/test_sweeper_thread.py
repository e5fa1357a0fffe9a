"""The memory sweep never holds up claims: it runs in the worker's sweeper thread, under the
sweep lease, while the rounds go on claiming tasks. Real `run_worker` processes against a
fake model server that hangs."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from automemory.models import AutoMemorySettings, SweepState
from controlplane.models import Task, TaskStatus
from tests.automemory.fake_openai import FakeOpenAI, hang
from tests.worker.conftest import agent_runs, counting_agent, wait_for

POLL_SECONDS = 0.5


def model_env(server: FakeOpenAI) -> dict:
    """A worker process's environment for the fake model server (the real settings: the
    test settings point the model client at a closed port)."""
    return {
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "AUTOMEMORY_MODEL_TIMEOUT_SECONDS": "45",
        "AUTOMEMORY_MODEL_MAX_RETRIES": "0",
    }


@pytest.fixture
def hanging_model():
    server = FakeOpenAI().start()
    server.respond_with(hang(60))
    yield server
    server.stop()


def seed_extraction_waiting_for_the_model(db) -> Task:
    """A user whose completed, idle task waits for the memory model; returns that task."""
    [task_id] = db.seed_tasks(1, prompt="Document the release steps")
    task = db.tasks().get(pk=task_id)
    AutoMemorySettings.objects.using(db.alias).create(
        user_id=task.user_id, generate_memories=True, extract_model="gpt-5-mini"
    )
    finished = timezone.now() - timedelta(hours=1)
    db.tasks().filter(pk=task_id).update(
        status=TaskStatus.COMPLETED,
        started_at=finished - timedelta(minutes=5),
        finished_at=finished,
        result_text="The release needs the changelog updated before tagging. " * 10,
    )
    return task


@pytest.mark.django_db(transaction=True)
def test_a_task_queued_while_the_sweep_waits_on_a_hanging_model_starts_within_a_poll(
    shared_db, worker_processes, hanging_model
):
    seed_extraction_waiting_for_the_model(shared_db)
    worker = worker_processes.start(
        shared_db,
        "--poll-interval",
        str(POLL_SECONDS),
        env=model_env(hanging_model),
    )
    wait_for(
        lambda: hanging_model.completion_requests,
        timeout=60,
        message=f"the sweep never called the model:\n{worker_processes.logs()}",
    )
    [task_id] = shared_db.seed_tasks(1, prompt="A task queued meanwhile")
    queued_at = time.monotonic()

    wait_for(
        lambda: shared_db.tasks().filter(pk=task_id).exclude(status=TaskStatus.QUEUED).exists(),
        timeout=30,
        interval=0.02,
        message=f"the task was not claimed:\n{worker_processes.logs()}",
    )
    waited = time.monotonic() - queued_at

    print(f"claimed {waited:.2f}s after it was queued (poll interval {POLL_SECONDS}s)")
    # Within one poll interval, and a margin for a loaded machine: not the model's 45 s.
    assert waited < POLL_SECONDS + 3, worker_processes.logs()
    assert worker.poll() is None
    assert len(hanging_model.completion_requests) == 1  # still the one hanging call
    lease = SweepState.objects.using(shared_db.alias).get(name="global")
    assert lease.lease_token is not None and lease.lease_holder.startswith("worker:")


@pytest.mark.django_db(transaction=True)
def test_of_two_workers_one_sweeps(shared_db, worker_processes, hanging_model):
    seed_extraction_waiting_for_the_model(shared_db)
    for _ in range(2):
        worker_processes.start(
            shared_db, "--poll-interval", str(POLL_SECONDS), env=model_env(hanging_model)
        )
    wait_for(lambda: hanging_model.completion_requests, timeout=60)
    time.sleep(3)  # both sweeper threads have tried the lease several times by now

    assert len(hanging_model.completion_requests) == 1
    holders = SweepState.objects.using(shared_db.alias).exclude(lease_token=None)
    assert holders.filter(name="global").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_three_workers_run_150_tasks_once_each_while_the_sweep_hangs_on_the_model(
    shared_db, worker_processes, hanging_model, tmp_path
):
    """The model endpoint hanging during a sweep, under load: what it held."""
    seed_extraction_waiting_for_the_model(shared_db)
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    env = {
        **model_env(hanging_model),
        "WORKER_COMMAND": counting_agent(runs_dir),
        "WORKER_SANDBOX_WRITABLE": str(runs_dir),
    }
    for i in range(3):
        worker_processes.start(
            shared_db, "--executor", "command", "--poll-interval", "0.1", "--worker-id", f"w{i}",
            env=env,
        )  # fmt: skip
    wait_for(
        lambda: hanging_model.completion_requests,
        timeout=60,
        message=f"the sweep never called the model:\n{worker_processes.logs()}",
    )
    ids = shared_db.seed_tasks(150, prompt="task {i} queued while the model hangs")
    queued_at = time.monotonic()

    wait_for(
        lambda: not shared_db.tasks().filter(pk__in=ids).exclude(status=TaskStatus.COMPLETED),
        timeout=60,
        interval=0.1,
        message=f"tasks left behind:\n{worker_processes.logs()}",
    )
    settle = time.monotonic() - queued_at

    runs = agent_runs(runs_dir)
    twice = [task_id for task_id, n in runs.items() if n > 1]
    lost = len(set(ids) - set(runs))
    print(
        f"model hanging through a sweep, 3 workers, 150 tasks of a 0.1 s agent: {lost} lost,"
        f" {len(twice)} run twice, all done {settle:.1f}s after they were queued;"
        f" {len(hanging_model.completion_requests)} model call (still hanging)"
    )
    assert lost == 0 and twice == []
    assert settle < 45  # well before the model call times out (45 s): the claims never waited
    assert len(hanging_model.completion_requests) == 1
