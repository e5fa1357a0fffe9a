"""One codex task on several hosts: the real CLI, a separate CODEX_HOME per host, the worker
storing the thread's session centrally after each turn and restoring it before each
resume; in the database and in a real S3-compatible server (moto's server mode)."""

from __future__ import annotations

import json
import shutil

import pytest

from controlplane.models import TaskStatus, UsageRecord
from tests.worker.real_codex.test_real_codex import TURN_REPLIES, continue_task, cost_of
from worker.codex import CodexExecutor
from worker.codex.session_files import session_files
from worker.models import CodexSession

PROMPTS = ("Fix the login bug", "Add a test", "Update the changelog")


@pytest.fixture(params=["database", "object"])
def storage(request):
    """Where session records keep their archives: the database, or a local S3 bucket."""
    if request.param == "object":
        return request.getfixturevalue("session_bucket")
    return None


@pytest.fixture
def hosts(codex_setup, tmp_path, monkeypatch, settings):
    """`hosts.use(name)`: the worker's CODEX_HOME (its configuration) and its task rooms
    become that host's own; `hosts.home(name, task)` is the task's CODEX_HOME there."""

    class Hosts:
        def folder(self, name):
            folder = tmp_path / f"host-{name}"
            if not folder.exists():
                (folder / "codex").mkdir(parents=True)
                shutil.copy(codex_setup.home / "config.toml", folder / "codex" / "config.toml")
            return folder

        def home(self, name, task):
            return self.folder(name) / "tasks" / f"task-{task.pk}" / "home" / ".codex"

        def use(self, name):
            folder = self.folder(name)
            monkeypatch.setenv("CODEX_HOME", str(folder / "codex"))
            settings.WORKER_TASK_ROOT = str(folder / "tasks")

    return Hosts()


def run_turn(task, worker_factory, hosts, host, turn):
    hosts.use(host)
    if turn > 1:
        continue_task(task, PROMPTS[turn - 1])
    worker_factory(CodexExecutor(), worker_id=f"worker-{host}").run_once()
    task.refresh_from_db()


def request_text(request) -> str:
    return json.dumps(request.body.get("input"))


def test_three_turns_on_three_hosts_continue_one_thread_and_bill_what_the_server_billed(
    codex_setup, storage, hosts, project, task_factory, worker_factory
):
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt=PROMPTS[0])

    for turn, host in enumerate(("a", "b", "c"), start=1):
        run_turn(task, worker_factory, hosts, host, turn)
        assert task.status == TaskStatus.COMPLETED, task.failure_reason
        assert task.turn == turn

    thread_id = task.thread_id
    requests = codex_setup.server.model_requests()
    assert len(requests) == 3
    for later in requests[1:]:  # turn 1's prompt and answer went along: the same thread
        assert PROMPTS[0] in request_text(later)
        assert "Fixed the login bug." in request_text(later)
    assert "Added a test." in request_text(requests[2])
    runs = UsageRecord.objects.filter(task=task).order_by("id")
    assert [(run.turn, run.thread_id, run.cost_usd) for run in runs] == [
        (turn, thread_id, cost_of(request)) for turn, request in enumerate(requests, start=1)
    ]
    assert task.cost_usd == cost_of(*requests)
    # every host now holds the thread; the record holds turn 3, as host c left it
    for host in ("a", "b", "c"):
        assert session_files(thread_id=thread_id, home=hosts.home(host, task))
    record = CodexSession.objects.get(thread_id=thread_id)
    assert (record.task_id, record.turn, record.error) == (task.pk, 3, "")
    assert record.stored_size < record.size
    if storage is not None:
        assert record.storage == "object"
        listed = storage.client.list_objects_v2(Bucket=storage.bucket)["Contents"]
        # the turn-1 and turn-2 objects were deleted once replaced
        assert [item["Key"] for item in listed] == [storage.prefix + record.object_name]
        assert listed[0]["Size"] == record.stored_size
    else:
        assert record.storage == "database"


def test_a_host_with_an_old_copy_of_the_thread_resumes_from_the_stored_record(
    codex_setup, hosts, project, task_factory, worker_factory
):
    """Host a ran turn 1, host b turn 2: host a's own copy is a turn behind for turn 3."""
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt=PROMPTS[0])

    for turn, host in enumerate(("a", "b", "a"), start=1):
        run_turn(task, worker_factory, hosts, host, turn)
        assert task.status == TaskStatus.COMPLETED, task.failure_reason

    last = codex_setup.server.model_requests()[2]
    assert "Added a test." in request_text(last)  # turn 2, run on host b
    assert task.cost_usd == cost_of(*codex_setup.server.model_requests())


def _two_turns_on_two_hosts(codex_setup, hosts, project, task_factory, worker_factory, damage):
    """Turn 1 on host a, `damage()`, turn 2 on host b: the task, and the model requests."""
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt=PROMPTS[0])
    run_turn(task, worker_factory, hosts, "a", 1)
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    thread_id = task.thread_id
    damage(CodexSession.objects.get(thread_id=thread_id))
    run_turn(task, worker_factory, hosts, "b", 2)
    assert task.thread_id == thread_id  # never a fresh thread
    return task, codex_setup.server.model_requests()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda bytes_: bytes_[:-40], "is corrupt: it decompresses to "),
        (lambda bytes_: bytes_[:20] + bytes([bytes_[20] ^ 1]) + bytes_[21:], "is corrupt: "),
        (lambda bytes_: b"", "is corrupt: it decompresses to 0 bytes"),
    ],
    ids=["truncated", "a byte changed", "empty"],
)
def test_a_corrupt_record_fails_the_resume_with_the_reason_and_runs_nothing(
    codex_setup, hosts, project, task_factory, worker_factory, damage, expected
):
    def corrupt(record):
        CodexSession.objects.filter(pk=record.pk).update(data=damage(bytes(record.data)))

    task, requests = _two_turns_on_two_hosts(
        codex_setup, hosts, project, task_factory, worker_factory, corrupt
    )
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith(f"codex thread {task.thread_id} cannot be resumed: ")
    assert expected in task.failure_reason
    assert len(requests) == 1  # the CLI never ran for turn 2
    assert not session_files(thread_id=task.thread_id, home=hosts.home("b", task))


def test_a_record_whose_checksum_does_not_match_is_refused(
    codex_setup, hosts, project, task_factory, worker_factory
):
    def other_sha(record):
        CodexSession.objects.filter(pk=record.pk).update(sha256="0" * 64)

    task, requests = _two_turns_on_two_hosts(
        codex_setup, hosts, project, task_factory, worker_factory, other_sha
    )
    assert task.status == TaskStatus.FAILED
    assert "is corrupt: its SHA-256 is " in task.failure_reason
    assert f"not the {'0' * 64} recorded" in task.failure_reason
    assert len(requests) == 1


def test_a_missing_record_fails_the_resume_saying_so(
    codex_setup, hosts, project, task_factory, worker_factory
):
    task, requests = _two_turns_on_two_hosts(
        codex_setup, hosts, project, task_factory, worker_factory, lambda record: record.delete()
    )
    assert task.status == TaskStatus.FAILED
    # the CLI's own words, and ours on why
    assert f"no rollout found for thread id {task.thread_id}" in task.failure_reason
    assert f"no session record of thread {task.thread_id} is stored" in task.failure_reason
    assert len(requests) == 1


@pytest.mark.parametrize("damage", ["deleted", "overwritten"])
def test_a_missing_or_damaged_object_fails_the_resume_saying_so(
    codex_setup, session_bucket, hosts, project, task_factory, worker_factory, damage
):
    def damage_object(record):
        key = session_bucket.prefix + record.object_name
        if damage == "deleted":
            session_bucket.client.delete_object(Bucket=session_bucket.bucket, Key=key)
        else:
            session_bucket.client.put_object(Bucket=session_bucket.bucket, Key=key, Body=b"junk")

    task, requests = _two_turns_on_two_hosts(
        codex_setup, hosts, project, task_factory, worker_factory, damage_object
    )
    assert task.status == TaskStatus.FAILED
    expected = "is missing: object storage has no" if damage == "deleted" else "is corrupt"
    assert expected in task.failure_reason
    assert len(requests) == 1


def test_a_thread_too_large_to_keep_resumes_on_its_own_host_and_fails_elsewhere_saying_why(
    codex_setup, hosts, project, task_factory, worker_factory, settings
):
    settings.WORKER_CODEX_SESSION_MAX_BYTES = 1000
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt=PROMPTS[0])
    run_turn(task, worker_factory, hosts, "a", 1)
    run_turn(task, worker_factory, hosts, "a", 2)
    assert task.status == TaskStatus.COMPLETED, task.failure_reason  # its own copy is current
    record = CodexSession.objects.get(thread_id=task.thread_id)
    assert (record.turn, record.stored_size, record.data) == (2, None, None)
    assert "over WORKER_CODEX_SESSION_MAX_BYTES (1000)" in record.error

    run_turn(task, worker_factory, hosts, "b", 3)

    assert task.status == TaskStatus.FAILED
    assert "(stored after turn 2) is not held: its session files are" in task.failure_reason
    assert len(codex_setup.server.model_requests()) == 2


def test_a_record_behind_the_ledger_is_not_resumed(
    codex_setup, hosts, project, task_factory, worker_factory
):
    """Turn 2's record was never stored (the database was down after it ran, say): turn 3 on
    another host would resume a thread without turn 2. It fails instead, saying so."""
    codex_setup.server.script(*TURN_REPLIES)
    task = task_factory(project, prompt=PROMPTS[0])
    run_turn(task, worker_factory, hosts, "a", 1)
    after_turn_1 = CodexSession.objects.values().get(thread_id=task.thread_id)
    run_turn(task, worker_factory, hosts, "b", 2)
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    CodexSession.objects.filter(thread_id=task.thread_id).update(**after_turn_1)

    run_turn(task, worker_factory, hosts, "c", 3)

    assert task.status == TaskStatus.FAILED
    assert "less than the usage ledger billed for the thread" in task.failure_reason
    assert len(codex_setup.server.model_requests()) == 2
