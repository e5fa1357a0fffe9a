"""Settings and flags change through one path, whatever the door: the API, the admin, a command.

Each path has the next normal (not forced) sweep look again at what the old settings skipped.
"""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from automemory.models import AutoMemoryLog, AutoMemorySettings, TaskAutoMemoryFlags
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.preferences import SETTINGS_FIELDS
from controlplane.models import AuditEvent, IdentityMemory
from tests.automemory.fake_openai import answer


@pytest.fixture
def admin_client(client, staff):
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    return client


@pytest.fixture
def skipped_task(task_factory, project, alice):
    """A task the sweep skipped because auto memory is off for alice."""
    task = task_factory(project, alice, completed=True)
    assert process_auto_memories().skipped["generate_disabled"] == 1
    assert process_auto_memories().scanned == 0, "a stable skip is not looked at again"
    return task


def extracted(task) -> bool:
    return IdentityMemory.objects.filter(source="auto", source_task=task).exists()


def settings_form(**changes) -> dict:
    """The admin form's POST body: the defaults with `changes`, as a browser sends them."""
    values = {name: getattr(AutoMemorySettings(), name) for name in SETTINGS_FIELDS}
    values.update(changes)
    body = {}
    for name, value in values.items():
        if isinstance(value, bool):
            if value:
                body[name] = "on"
        elif value is None:
            body[name] = ""
        elif isinstance(value, list | dict):
            body[name] = json.dumps(value)
        else:
            body[name] = str(value)
    return body


# --- Admin --------------------------------------------------------------------------------------


def test_settings_added_in_the_admin_are_picked_up_by_the_next_sweep(
    admin_client, alice, staff, skipped_task
):
    response = admin_client.post(
        "/admin/automemory/automemorysettings/add/",
        {"user": alice.pk, **settings_form(generate_memories=True)},
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert AutoMemorySettings.objects.get(user=alice).generate_memories is True
    assert process_auto_memories().extracted == 1
    assert extracted(skipped_task)
    event = AuditEvent.objects.get(action="auto_memory_settings_updated")
    assert event.actor == staff and event.target_id == str(alice.pk)


def test_settings_changed_in_the_admin_are_picked_up_by_the_next_sweep(
    admin_client, alice, auto_memory_on, skipped_task
):
    row = auto_memory_on(alice, generate_memories=False)
    AutoMemoryLog.objects.update(recheck=False)

    response = admin_client.post(
        f"/admin/automemory/automemorysettings/{row.pk}/change/",
        settings_form(generate_memories=True, idle_seconds=60),
    )

    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.generate_memories, row.idle_seconds) == (True, 60)
    assert process_auto_memories().extracted == 1


def test_the_admin_validates_settings_and_saves_nothing_wrong(
    admin_client, alice, auto_memory_on, skipped_task
):
    row = auto_memory_on(alice, generate_memories=False)
    AutoMemoryLog.objects.update(recheck=False)

    response = admin_client.post(
        f"/admin/automemory/automemorysettings/{row.pk}/change/",
        settings_form(generate_memories=True, min_rate_limit_remaining_percent=101),
    )

    assert response.status_code == 200
    row.refresh_from_db()
    assert row.generate_memories is False
    assert not AutoMemoryLog.objects.filter(recheck=True).exists()


def test_a_flag_changed_in_the_admin_is_picked_up_by_the_next_sweep(
    admin_client, alice, staff, auto_memory_on, task_factory, project
):
    auto_memory_on(alice)
    task = task_factory(project, alice, completed=True)
    flags = TaskAutoMemoryFlags.objects.create(task=task, generate_memories=False)
    assert process_auto_memories().skipped["generate_disabled"] == 1

    response = admin_client.post(
        f"/admin/automemory/taskautomemoryflags/{flags.pk}/change/",
        {"use_memories": "unknown", "generate_memories": "unknown"},
    )

    assert response.status_code == 302
    flags.refresh_from_db()
    assert flags.generate_memories is None and flags.updated_by == staff
    assert process_auto_memories().extracted == 1
    assert extracted(task)


def test_settings_and_flags_are_not_deleted_in_the_admin(
    admin_client, alice, auto_memory_on, task_factory, project
):
    row = auto_memory_on(alice)
    flags = TaskAutoMemoryFlags.objects.create(task=task_factory(project, alice))

    settings_page = f"/admin/automemory/automemorysettings/{row.pk}/delete/"
    flags_page = f"/admin/automemory/taskautomemoryflags/{flags.pk}/delete/"
    assert admin_client.post(settings_page, {"post": "yes"}).status_code == 403
    assert admin_client.post(flags_page, {"post": "yes"}).status_code == 403
    assert AutoMemorySettings.objects.filter(pk=row.pk).exists()


# --- manage.py auto_memory_settings -------------------------------------------------------------


def run_command(*args) -> dict:
    out = StringIO()
    call_command("auto_memory_settings", *args, stdout=out)
    return json.loads(out.getvalue())


def test_the_command_shows_the_defaults(alice):
    shown = run_command("alice")
    assert shown["username"] == "alice"
    assert shown["generate_memories"] is False and shown["idle_seconds"] == 900
    assert set(SETTINGS_FIELDS) <= set(shown)
    assert not AutoMemorySettings.objects.exists(), "looking changes nothing"


def test_the_command_changes_settings_and_the_next_sweep_sees_it(alice, skipped_task, fake_openai):
    fake_openai.respond_with(
        answer(
            {
                "worth_remembering": True,
                "kind": "fact",
                "memory": "Login sessions are checked in auth.py.",
                "keywords": ["auth"],
                "citations": [],
                "reason": "a convention",
            }
        )
    )
    shown = run_command(
        "alice",
        "--set",
        "generate_memories=true",
        "--set",
        "min_rate_limit_remaining_percent=10",
        "--set",
        "extract_model=gpt-5-mini",
    )

    assert shown["generate_memories"] is True
    assert shown["min_rate_limit_remaining_percent"] == 10
    assert shown["extract_model"] == "gpt-5-mini"
    assert AutoMemorySettings.objects.get(user=alice).extract_model == "gpt-5-mini"
    assert process_auto_memories().extracted == 1
    assert fake_openai.completion_requests[0].body["model"] == "gpt-5-mini"
    assert AuditEvent.objects.filter(action="auto_memory_settings_updated").count() == 1


def test_the_command_clears_a_model_with_null(alice, auto_memory_on):
    auto_memory_on(alice, extract_model="gpt-5")
    assert run_command("alice", "--set", "extract_model=null")["extract_model"] is None


@pytest.mark.parametrize(
    "assignment",
    [
        "idle_seconds=-1",
        "idle_seconds=soon",
        "generate_memories=maybe",
        "min_rate_limit_remaining_percent=101",
        "no_such_setting=1",
        "idle_seconds",
        "=1",
    ],
)
def test_the_command_refuses_bad_values_and_changes_nothing(alice, auto_memory_on, assignment):
    auto_memory_on(alice, idle_seconds=30)
    with pytest.raises(CommandError):
        call_command(
            "auto_memory_settings", "alice", "--set", "use_memories=false", "--set", assignment
        )
    row = AutoMemorySettings.objects.get(user=alice)
    assert (row.idle_seconds, row.use_memories) == (30, True)
    assert not AuditEvent.objects.filter(action="auto_memory_settings_updated").exists()


def test_the_command_refuses_an_unknown_user(db):
    with pytest.raises(CommandError, match="No user named"):
        call_command("auto_memory_settings", "nobody", stdout=StringIO())
