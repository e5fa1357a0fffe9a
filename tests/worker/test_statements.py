"""What a claimed task costs the database: a claim and a finish, whatever the user's history.

The counts include transaction control (BEGIN/COMMIT, or SAVEPOINT/RELEASE), as
`benchmarks/bench_history.py` prints them against the same targets: at most 8 statements
per claimed task on the plain path, 12 with a quota limit and an injection of 5 user and
5 project memories (the injection's transaction: the task's ids, the audit event, and the
memories' counters with their day's counts for the health page in one statement).
"""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automemory.models import task_injected_ids
from automemory.services import injector
from automemory.services.injector import inject_memories as real_inject_memories
from controlplane.models import Quota, Task, TaskStatus, UsageRecord
from worker.models import TaskRun

pytestmark = pytest.mark.django_db(transaction=True)


def _statements_per_task(worker, tasks: int) -> list[int]:
    counts = []
    with CaptureQueriesContext(connection) as queries:
        for _ in range(tasks):
            before = len(queries.captured_queries)
            worker.run_one(worker.claim_one())
            counts.append(len(queries.captured_queries) - before)
    return counts


def test_a_plain_task_costs_at_most_8_statements(project, alice, task_factory, worker):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("100"))
    for _ in range(3):
        task_factory(project, alice)

    counts = _statements_per_task(worker, 3)

    assert max(counts) <= 8, counts
    assert set(Task.objects.values_list("status", flat=True)) == {TaskStatus.COMPLETED}
    assert UsageRecord.objects.count() == TaskRun.objects.count() == 3


def test_a_task_with_a_quota_limit_and_ten_memories_injected_costs_at_most_12(
    project, alice, task_factory, worker, memory_factory, auto_memory_on, monkeypatch
):
    monkeypatch.setattr(injector, "inject_memories", real_inject_memories)  # not the stub
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("100"))
    auto_memory_on(alice)
    for i in range(5):
        memory_factory(user=alice, content=f"I prefer small commits ({i})")
        memory_factory(project=project, content=f"Deploys go through make ({i})")
    tasks = [task_factory(project, alice) for _ in range(3)]

    counts = _statements_per_task(worker, 3)

    assert max(counts) <= 12, counts
    for task in tasks:
        task.refresh_from_db()
        assert task.status == TaskStatus.COMPLETED
        assert len(task_injected_ids(task)) == 10


def test_a_task_on_a_repository_costs_at_most_8_more_when_its_turn_changed_files(
    project, alice, task_factory, worker_factory, git_remote, settings
):
    """The repository's row, its reachability, the base commit, the branch's store (a lock
    of the task and one upsert) and the diff in the finish: a fixed number, whatever the
    history."""
    from controlplane.services.repositories import repository_set
    from tests.worker.conftest import shell_agent

    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("100"))
    repository_set(actor=alice, project=project, url=git_remote.url, default_branch="main")
    for _ in range(3):
        task_factory(project, alice, branch="main")
    worker = worker_factory(shell_agent('echo "$CONTROLPLANE_TASK_ID" >> README.md', settings))

    counts = _statements_per_task(worker, 3)

    assert max(counts) <= 16, counts
    assert set(Task.objects.values_list("status", flat=True)) == {TaskStatus.COMPLETED}
    assert all(Task.objects.values_list("head_commit", flat=True))
