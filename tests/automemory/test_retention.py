"""Retention: `max_unused_days` archives unused auto memories; restoring brings them back."""

import json
import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemorySettings, MemoryState
from automemory.services.retention import memories_archive_unused
from controlplane.models import (
    AuditEvent,
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemoryStatus,
)
from tests.conftest import memory_stored
from worker.executors.echo import EchoExecutor
from worker.loop import Worker

START = "2026-01-01 12:00:00"


@pytest.fixture
def retention_days(db):
    def set_days(user, days: int) -> AutoMemorySettings:
        row, _ = AutoMemorySettings.objects.update_or_create(
            user=user, defaults={"max_unused_days": days}
        )
        return row

    return set_days


@pytest.fixture
def auto_memory(task_factory):
    """An active auto memory of `project`, extracted from a finished task of `user`."""
    counter = iter(range(1, 10_000))

    def make(project, user, *, goal: str | None = None, **fields) -> IdentityMemory:
        number = next(counter)
        task = task_factory(project, user, prompt=f"Task {number}", completed=True)
        fields.setdefault("status", MemoryStatus.ACTIVE)
        return memory_stored(
            scope=MemoryScope.PROJECT,
            project=project,
            content=f"Fact number {number}.",
            source=MemorySource.AUTO,
            source_task=task,
            goal_key=goal or f"goal-{number}",
            created_by=user,
            **fields,
        )

    return make


def _status(memory: IdentityMemory) -> str:
    memory.refresh_from_db()
    return memory.status


def test_off_by_default_nothing_is_archived(project, alice, auto_memory):
    with freeze_time(START):
        memory = auto_memory(project, alice)
    with freeze_time("2030-01-01"):
        summary = memories_archive_unused(now=timezone.now())
    assert summary.archived == 0 and summary.users == 0
    assert _status(memory) == MemoryStatus.ACTIVE


def test_archives_auto_memories_neither_cited_nor_written_within_the_days(
    project, alice, auto_memory, retention_days
):
    retention_days(alice, 30)
    with freeze_time(START) as clock:
        stale = auto_memory(project, alice)
        injected_lately = auto_memory(project, alice)
        cited_lately = auto_memory(project, alice)
        manual = IdentityMemory.objects.create(
            scope=MemoryScope.PROJECT,
            project=project,
            content="Deploys go through make deploy.",
            created_by=alice,
        )
        superseded = auto_memory(project, alice, status=MemoryStatus.SUPERSEDED)
        clock.tick(timedelta(days=10))
        young = auto_memory(project, alice)
        clock.tick(timedelta(days=15))
        MemoryState.objects.update_or_create(
            memory_id=injected_lately.pk,
            defaults=dict(injection_count=3, last_injected_at=timezone.now()),
        )
        MemoryState.objects.update_or_create(
            memory_id=cited_lately.pk, defaults=dict(cite_count=1, last_cited_at=timezone.now())
        )
        clock.tick(timedelta(days=5, seconds=1))  # 30 days and a second after START
        summary = memories_archive_unused(now=timezone.now())
        archived_at = timezone.now()

    # Injected is not used: only a citation (or a write) keeps a memory.
    assert sorted(summary.archived_ids) == sorted([stale.pk, injected_lately.pk])
    assert summary.as_dict() == {
        "users": 1,
        "archived": 2,
        "archived_ids": summary.archived_ids,
        "more": False,
    }
    stale.refresh_from_db()
    assert stale.status == MemoryStatus.ARCHIVED and stale.archived_at == archived_at
    assert _status(injected_lately) == MemoryStatus.ARCHIVED
    assert _status(cited_lately) == MemoryStatus.ACTIVE
    assert _status(young) == MemoryStatus.ACTIVE
    assert _status(manual) == MemoryStatus.ACTIVE  # manual memories are never archived
    assert _status(superseded) == MemoryStatus.SUPERSEDED


def test_exactly_the_limit_is_not_yet_unused(project, alice, auto_memory, retention_days):
    retention_days(alice, 7)
    with freeze_time(START) as clock:
        memory = auto_memory(project, alice)
        clock.tick(timedelta(days=7))
        assert memories_archive_unused(now=timezone.now()).archived == 0
        clock.tick(timedelta(microseconds=1))
        assert memories_archive_unused(now=timezone.now()).archived_ids == [memory.pk]


def test_the_source_tasks_user_setting_governs(project, alice, bob, auto_memory, retention_days):
    """Alice (setting off) and Bob (30 days) share a project: only Bob's memories go."""
    retention_days(bob, 30)
    with freeze_time(START) as clock:
        alices = auto_memory(project, alice)
        bobs = auto_memory(project, bob)
        clock.tick(timedelta(days=31))
        summary = memories_archive_unused(now=timezone.now())
    assert summary.archived_ids == [bobs.pk]
    assert _status(alices) == MemoryStatus.ACTIVE


def test_each_archive_is_logged_and_audited(project, alice, auto_memory, retention_days, caplog):
    retention_days(alice, 1)
    with freeze_time(START) as clock:
        first = auto_memory(project, alice)
        second = auto_memory(project, alice)
        clock.tick(timedelta(days=2))
        with caplog.at_level(logging.INFO, logger="automemory.services.retention"):
            summary = memories_archive_unused(now=timezone.now())
    assert sorted(summary.archived_ids) == sorted([first.pk, second.pk])
    events = AuditEvent.objects.filter(action="memory_archived").order_by("target_id")
    assert sorted(event.target_id for event in events) == sorted([str(first.pk), str(second.pk)])
    assert all(event.actor_label == "retention" for event in events)
    assert all(event.data["project_id"] == project.pk for event in events)
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"memory {first.pk} of project {project.pk} archived" in m for m in messages)
    assert any("archived 2 memories" in message for message in messages)


def test_a_pass_archives_at_most_the_batch_and_says_more_wait(
    project, alice, auto_memory, retention_days
):
    retention_days(alice, 1)
    with freeze_time(START) as clock:
        memories = [auto_memory(project, alice) for _ in range(5)]
        clock.tick(timedelta(days=2))
        passes = [memories_archive_unused(now=timezone.now(), batch=2) for _ in range(4)]
    assert [p.archived for p in passes] == [2, 2, 1, 0]
    assert [p.more for p in passes] == [True, True, False, False]
    archived = sorted(pk for p in passes for pk in p.archived_ids)
    assert archived == sorted(m.pk for m in memories)
    assert memories_archive_unused(now=timezone.now(), batch=0).archived == 0


def test_restore_brings_back_and_restarts_the_clock(
    project, alice, auto_memory, retention_days, api_client_for
):
    retention_days(alice, 30)
    client = api_client_for(alice)
    with freeze_time(START) as clock:
        memory = auto_memory(project, alice)
        clock.tick(timedelta(days=31))
        assert memories_archive_unused(now=timezone.now()).archived_ids == [memory.pk]

        listed = client.get(f"/projects/{project.pk}/memories?status=archived").json()
        assert [row["id"] for row in listed["results"]] == [memory.pk]
        assert listed["results"][0]["archived_at"] is not None

        response = client.post(f"/memories/{memory.pk}/restore")
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["status"] == "active" and body["archived_at"] is None
        assert AuditEvent.objects.filter(action="memory_restored", target_id=memory.pk).exists()

        # The next pass keeps it: restoring counts as a use.
        clock.tick(timedelta(hours=1))
        assert memories_archive_unused(now=timezone.now()).archived == 0
        clock.tick(timedelta(days=30))
        assert memories_archive_unused(now=timezone.now()).archived_ids == [memory.pk]


def test_restore_refuses_when_the_goal_has_another_active_memory(
    project, alice, auto_memory, retention_days, api_client_for
):
    retention_days(alice, 30)
    with freeze_time(START) as clock:
        old = auto_memory(project, alice, goal="deploys")
        clock.tick(timedelta(days=31))
        memories_archive_unused(now=timezone.now())
        newer = auto_memory(project, alice, goal="deploys")  # a later task of the same goal
    response = api_client_for(alice).post(f"/memories/{old.pk}/restore")
    assert response.status_code == 409
    assert f"memory {newer.pk}" in response.json()["detail"]
    assert _status(old) == MemoryStatus.ARCHIVED


def test_a_pass_reads_only_pending_work(project, alice, auto_memory, retention_days):
    """Fresh memories (history) cost nothing: the query count depends on what is archived."""
    retention_days(alice, 30)
    with freeze_time(START) as clock:
        for _ in range(40):
            auto_memory(project, alice)
        clock.tick(timedelta(days=1))
        with CaptureQueriesContext(connection) as queries:
            assert memories_archive_unused(now=timezone.now()).archived == 0
    # The enabled users, then one read of the user's stale memories (in a transaction).
    selects = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    assert len(selects) == 2, selects


def test_the_worker_runs_a_pass_at_most_once_per_interval(
    project, alice, auto_memory, retention_days, settings
):
    settings.AUTOMEMORY_RETENTION_INTERVAL_SECONDS = 5 * 24 * 3600
    retention_days(alice, 1)
    worker = Worker(executor=EchoExecutor(), heartbeat_seconds=0, poll_interval=0)
    with freeze_time(START) as clock:  # freezegun moves the monotonic clock too
        first = auto_memory(project, alice)
        clock.tick(timedelta(days=2))
        worker.sweep_now()
        assert _status(first) == MemoryStatus.ARCHIVED
        second = auto_memory(project, alice)
        clock.tick(timedelta(days=2))
        worker.sweep_now()  # two days after the last pass: not due
        assert _status(second) == MemoryStatus.ACTIVE
        clock.tick(timedelta(days=3, seconds=1))
        worker.sweep_now()
        assert _status(second) == MemoryStatus.ARCHIVED


def test_only_the_sweep_lease_holder_archives(project, alice, auto_memory, retention_days):
    retention_days(alice, 1)
    holder = Worker(executor=EchoExecutor(), heartbeat_seconds=0, poll_interval=0)
    other = Worker(executor=EchoExecutor(), heartbeat_seconds=0, poll_interval=0)
    with freeze_time(START) as clock:
        memory = auto_memory(project, alice)
        clock.tick(timedelta(days=2))
        holder.sweeper.sweep()  # takes the lease (and keeps it), archives nothing itself
        other.sweep_now()
        assert _status(memory) == MemoryStatus.ACTIVE
        holder.sweeper.release()
        other.sweep_now()
        assert _status(memory) == MemoryStatus.ARCHIVED


def test_run_auto_memory_command_archives_with_the_flag(
    project, alice, auto_memory, retention_days
):
    retention_days(alice, 1)
    with freeze_time(START) as clock:
        memory = auto_memory(project, alice)
        clock.tick(timedelta(days=2))
        out = StringIO()
        call_command("run_auto_memory", "--user", alice.username, stdout=out)
        assert "retention" not in json.loads(out.getvalue())
        assert _status(memory) == MemoryStatus.ACTIVE
        out = StringIO()
        call_command("run_auto_memory", "--user", alice.username, "--archive-unused", stdout=out)
    assert json.loads(out.getvalue())["retention"]["archived_ids"] == [memory.pk]
    assert _status(memory) == MemoryStatus.ARCHIVED
