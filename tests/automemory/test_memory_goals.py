"""An auto memory's goal lives in auto memory's own table with the one-active-per-goal rule;
the host's row changes it through the triggers that keep the rule's copies right."""

import importlib

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from automemory.models import MemoryGoal
from controlplane.errors import ConflictError
from controlplane.models import IdentityMemory, MemoryStatus, MemoryVisibility
from controlplane.services.memories import memory_restore

pytestmark = pytest.mark.django_db(transaction=True)


def goal_of(memory: IdentityMemory) -> tuple:
    goal = MemoryGoal.objects.get(memory_id=memory.pk)
    return (goal.project_id, goal.author_id, goal.visibility, goal.active)


@pytest.fixture
def auto(memory_factory, task_factory, project, alice):
    def make(goal: str = "deploys", **fields) -> IdentityMemory:
        return memory_factory(
            project=project,
            user=alice,
            source="auto",
            source_task=task_factory(project, alice, completed=True),
            goal_key=goal,
            **fields,
        )

    return make


def test_the_copies_follow_every_change_of_the_hosts_row(auto, project, alice, user_factory):
    memory = auto()
    assert goal_of(memory) == (project.pk, alice.pk, "project", True)

    archived = {"status": MemoryStatus.ARCHIVED, "archived_at": timezone.now()}
    IdentityMemory.objects.filter(pk=memory.pk).update(**archived)
    assert goal_of(memory)[3] is False
    IdentityMemory.objects.filter(pk=memory.pk).update(status="active", archived_at=None)
    assert goal_of(memory)[3] is True

    IdentityMemory.objects.filter(pk=memory.pk).update(visibility=MemoryVisibility.AUTHOR)
    assert goal_of(memory)[2] == "author"

    carol = user_factory("carol")
    IdentityMemory.objects.filter(pk=memory.pk).update(created_by=carol)
    assert goal_of(memory)[1] == carol.pk
    carol.delete()  # the host's row gets no author (SET_NULL): neither does the copy
    assert goal_of(memory)[1] is None

    IdentityMemory.objects.filter(pk=memory.pk).update(source="manual")
    assert goal_of(memory)[3] is False
    IdentityMemory.objects.get(pk=memory.pk).delete()
    assert not MemoryGoal.objects.filter(memory_id=memory.pk).exists()


def test_the_database_keeps_one_active_memory_per_goal_whoever_changes_the_host_row(auto):
    older = auto(status=MemoryStatus.SUPERSEDED)
    auto()  # the goal's active memory
    # A plain update of the host's row (no service, no hook) is refused all the same.
    with pytest.raises(IntegrityError), transaction.atomic():
        IdentityMemory.objects.filter(pk=older.pk).update(status=MemoryStatus.ACTIVE)
    assert IdentityMemory.objects.get(pk=older.pk).status == MemoryStatus.SUPERSEDED
    # Held for its author, the goal may have one more (one per author).
    held = auto(status=MemoryStatus.SUPERSEDED, visibility=MemoryVisibility.AUTHOR)
    IdentityMemory.objects.filter(pk=held.pk).update(status=MemoryStatus.ACTIVE)
    assert goal_of(held)[3] is True


def test_restore_names_the_goals_active_memory(auto, alice):
    archived = auto(status=MemoryStatus.ARCHIVED, archived_at=timezone.now())
    current = auto()
    with pytest.raises(ConflictError, match=f"memory {current.pk}"):
        memory_restore(user=alice, memory=archived)
    IdentityMemory.objects.filter(pk=current.pk).delete()
    assert memory_restore(user=alice, memory=archived).status == MemoryStatus.ACTIVE
    assert goal_of(archived)[3] is True


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite table rebuilds only")
def test_a_sqlite_table_rebuild_gets_the_trigger_back_after_migrate(auto):
    from automemory.services.memory_goals import TRIGGERS, goal_triggers_ensure

    trigger = importlib.import_module(TRIGGERS).TRIGGER
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {trigger}")  # as a rebuild of identity_memories does
    goal_triggers_ensure()
    memory = auto()
    IdentityMemory.objects.filter(pk=memory.pk).update(status=MemoryStatus.SUPERSEDED)
    assert goal_of(memory)[3] is False
