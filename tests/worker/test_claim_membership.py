"""A task whose user left its project (or was removed) after queueing it: the claim refuses
it, nothing of the project's memories is injected and the agent never runs."""

import pytest

from automemory.models import task_injected_ids
from automemory.services import injector
from controlplane.models import AuditEvent, Membership, TaskStatus
from controlplane.services.projects import membership_remove
from tests.worker.conftest import SpyExecutor
from worker.models import RunOutcome, TaskRun

REAL_INJECT = injector.inject_memories


@pytest.fixture
def real_injection(monkeypatch, auto_memory_on, bob):
    """The real injector instead of the stub, and memory on for bob."""
    monkeypatch.setattr("automemory.services.injector.inject_memories", REAL_INJECT)
    auto_memory_on(bob)


def test_it_refuses_at_claim_a_task_whose_user_was_removed(
    project, alice, bob, task_factory, memory_factory, worker_factory, real_injection
):
    memory_factory(project=project, content="The staging database password lives in vault.")
    task = task_factory(project, bob, prompt="Where is the staging password kept?")
    membership_remove(actor=alice, project=project, username="bob")
    spy = SpyExecutor()

    report = worker_factory(executor=spy).run_once()

    assert [(run.task_id, run.outcome) for run in report.runs] == [(task.pk, "refused")]
    assert "no longer a member" in report.runs[0].reason
    assert spy.requests == []
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "the task's user is no longer a member of its project"
    assert task_injected_ids(task) == []
    assert not AuditEvent.objects.filter(action=injector.INJECTED_EVENT).exists()
    refused = AuditEvent.objects.get(action="worker_task_refused")
    assert refused.data["kind"] == "membership"
    assert TaskRun.objects.get(task=task).outcome == RunOutcome.REFUSED


def test_it_refuses_without_asking_the_injector(
    project, alice, bob, task_factory, worker_factory, memory_hooks
):
    task_factory(project, bob)
    Membership.objects.filter(project=project, user=bob).delete()
    spy = SpyExecutor()

    worker_factory(executor=spy).run_once()

    assert memory_hooks.inject_calls == []
    assert spy.requests == []


def test_it_refuses_a_resume_of_a_removed_users_task(
    project, alice, bob, task_factory, worker_factory, memory_hooks
):
    task = task_factory(project, bob, is_resume=True, turn=2)
    membership_remove(actor=alice, project=project, username="bob")
    spy = SpyExecutor()

    report = worker_factory(executor=spy).run_once()

    assert report.runs[0].outcome == "refused"
    assert spy.requests == [] and memory_hooks.inject_calls == []
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED


def test_it_runs_and_injects_the_tasks_of_members(
    project, alice, bob, task_factory, memory_factory, worker_factory, real_injection
):
    memory = memory_factory(project=project, content="Deploys run with make deploy on staging.")
    task = task_factory(project, bob, prompt="Deploy the staging build")
    later = task_factory(project, alice, prompt="Deploy again")
    spy = SpyExecutor()

    report = worker_factory(executor=spy).run_once()

    assert [run.outcome for run in report.runs] == ["completed", "completed"]
    assert [request.task_id for request in spy.requests] == [task.pk, later.pk]
    task.refresh_from_db()
    assert task_injected_ids(task) == [memory.pk]
    assert not AuditEvent.objects.filter(action="worker_task_refused").exists()


def test_it_leaves_the_quota_refusal_as_it_was(project, bob, task_factory, worker_factory):
    from controlplane.models import Quota

    Quota.objects.create(user=bob, monthly_limit_usd=0)
    task = task_factory(project, bob)

    report = worker_factory(executor=SpyExecutor()).run_once()

    assert report.runs[0].outcome == "refused"
    assert "quota" in report.runs[0].reason
    assert AuditEvent.objects.get(action="worker_task_refused").data["kind"] == "quota"
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
