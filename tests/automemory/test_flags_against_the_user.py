"""Another member may turn a task's switches off, never on against its user's own setting;
the task's user may do both. The sweep and the injector follow what is stored."""

import importlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection

from automemory.models import AutoMemoryLog, TaskAutoMemoryFlags
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.injector import inject_memories
from controlplane.models import AuditEvent, IdentityMemory, MemorySource

RESULT = "Done. " + "The session check now reads the cookie first, then the header. " * 6


def url(task):
    return f"/tasks/{task.pk}/auto-memory-flags"


@pytest.fixture
def bobs_task(task_factory, project, bob):
    return task_factory(
        project,
        bob,
        prompt="Fix the login bug",
        completed=True,
        finished_ago=timedelta(hours=2),
        result_text=RESULT,
    )


def _auto_memories():
    return IdentityMemory.objects.filter(source=MemorySource.AUTO)


def test_it_refuses_a_member_turning_on_generation_the_user_turned_off(
    api_client_for, alice, bob, bobs_task, auto_memory_on
):
    auto_memory_on(bob, generate_memories=False)

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": True}, format="json"
    )

    assert response.status_code == 400
    assert "task's user" in response.json()["generate_memories"][0]
    assert not TaskAutoMemoryFlags.objects.exists()
    assert not AuditEvent.objects.filter(action="auto_memory_flags_set").exists()
    process_auto_memories(user=bob, force=True)
    assert not _auto_memories().exists()
    assert AutoMemoryLog.objects.get(task=bobs_task).reason == "generate_disabled"


def test_it_refuses_a_member_clearing_an_off_flag_of_a_user_who_is_on(
    api_client_for, alice, bob, bobs_task, auto_memory_on
):
    auto_memory_on(bob)
    TaskAutoMemoryFlags.objects.create(task=bobs_task, generate_memories=False, updated_by=bob)

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": None}, format="json"
    )

    assert response.status_code == 400
    assert TaskAutoMemoryFlags.objects.get(task=bobs_task).generate_memories is False
    process_auto_memories(user=bob, force=True)
    assert not _auto_memories().exists()


def test_it_writes_nothing_when_one_field_is_refused(
    api_client_for, alice, bob, bobs_task, auto_memory_on
):
    auto_memory_on(bob, use_memories=False)

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": False, "use_memories": True}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["use_memories"]
    assert not TaskAutoMemoryFlags.objects.exists()


def test_it_lets_a_member_turn_generation_off_and_the_sweep_honours_it(
    api_client_for, alice, bob, bobs_task, auto_memory_on
):
    auto_memory_on(bob)

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": False}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["effective_generate_memories"] is False
    process_auto_memories(user=bob, force=True)
    assert not _auto_memories().exists()
    assert AutoMemoryLog.objects.get(task=bobs_task).reason == "generate_disabled"


def test_it_lets_a_member_turn_use_off_and_the_injector_honours_it(
    api_client_for, alice, bob, project, task_factory, memory_factory, auto_memory_on
):
    auto_memory_on(bob)
    memory = memory_factory(
        project=project, content="The login page lives in auth.py and login.html."
    )
    task = task_factory(project, bob, prompt="Work on the login page")
    other = task_factory(project, bob, prompt="Work on the login page")

    response = api_client_for(alice).post(url(task), {"use_memories": False}, format="json")

    assert response.status_code == 200
    assert inject_memories(task=task, prompt=task.prompt, goal=None).memory_ids == []
    assert inject_memories(task=other, prompt=other.prompt, goal=None).memory_ids == [memory.pk]


def test_it_lets_the_users_own_setting_decide_after_a_members_true(
    api_client_for, alice, bob, bobs_task, auto_memory_on
):
    """A `true` that changes nothing now is not stored: it must not outlive Bob's "off"."""
    auto_memory_on(bob)

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": True}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["generate_memories"] is None
    auto_memory_on(bob, generate_memories=False)
    process_auto_memories(user=bob, force=True)
    assert not _auto_memories().exists()


@pytest.mark.parametrize(
    ("stored", "bobs_setting", "sent"),
    [
        (True, True, True),  # the same value as stored
        (True, False, None),  # follows Bob, who is off
        (True, True, None),  # still on: follows Bob's own "on"
        (False, False, None),  # still off
        (None, False, False),
    ],
)
def test_it_accepts_a_members_change_that_turns_nothing_on(
    api_client_for, alice, bob, bobs_task, auto_memory_on, stored, bobs_setting, sent
):
    auto_memory_on(bob, generate_memories=bobs_setting)
    TaskAutoMemoryFlags.objects.create(task=bobs_task, generate_memories=stored, updated_by=bob)
    before = bobs_setting if stored is None else stored

    response = api_client_for(alice).post(
        url(bobs_task), {"generate_memories": sent}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["effective_generate_memories"] in (before, False)


@pytest.mark.parametrize("sent", [True, None])
def test_it_lets_the_tasks_user_turn_generation_on(
    api_client_for, bob, bobs_task, auto_memory_on, sent
):
    auto_memory_on(bob, generate_memories=sent is None)
    TaskAutoMemoryFlags.objects.create(task=bobs_task, generate_memories=False)

    response = api_client_for(bob).post(url(bobs_task), {"generate_memories": sent}, format="json")

    assert response.status_code == 200
    assert response.json()["effective_generate_memories"] is True
    process_auto_memories(user=bob, force=True)
    assert _auto_memories().filter(source_task=bobs_task).count() == 1


def test_the_console_refuses_it_too(client, alice, bob, bobs_task, auto_memory_on):
    auto_memory_on(bob, generate_memories=False)
    client.force_login(alice)

    response = client.post(
        f"/console/tasks/{bobs_task.pk}/flags",
        {"use_memories": "follow", "generate_memories": "on"},
    )

    assert response.status_code == 400
    assert not TaskAutoMemoryFlags.objects.exists()


def test_it_sets_back_a_true_another_member_stored_before_the_rule(
    alice, bob, bobs_task, auto_memory_on
):
    auto_memory_on(bob, generate_memories=False, use_memories=False)
    TaskAutoMemoryFlags.objects.create(
        task=bobs_task, generate_memories=True, use_memories=True, updated_by=alice
    )
    own = TaskAutoMemoryFlags.objects.create(
        task=_another_task_of(bobs_task), generate_memories=True, updated_by=bob
    )
    migration = importlib.import_module("automemory.migrations.0014_flags_turned_on_by_others")

    migration.forward(apps, SimpleNamespace(connection=connection))

    flags = TaskAutoMemoryFlags.objects.get(task=bobs_task)
    assert (flags.generate_memories, flags.use_memories) == (None, None)
    own.refresh_from_db()
    assert own.generate_memories is True
    process_auto_memories(user=bob, force=True)
    assert not _auto_memories().filter(source_task=bobs_task).exists()


def _another_task_of(task):
    return type(task).objects.create(
        project=task.project, user=task.user, prompt="Another task", status=task.status
    )
