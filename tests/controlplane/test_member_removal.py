"""Removing a member (`DELETE /projects/{id}/members/{username}`), and what a removed user's
running task may still reach through its memory key: nothing."""

import pytest

from automemory.services.memory_tools import KeyRefused, tool_get, tool_search
from automemory.services.task_keys import (
    TaskKeyInvalid,
    task_key_authenticate,
    task_key_new,
)
from controlplane.models import AuditEvent, Membership, Role, TaskStatus

from .helpers import post_json


def _url(project, username):
    return f"/projects/{project.pk}/members/{username}"


@pytest.fixture
def running_task(task_factory):
    def make(project, user):
        minted = task_key_new()
        task = task_factory(
            project, user, status=TaskStatus.RUNNING, memory_key_hash=minted.key_hash
        )
        return task, minted.key

    return make


def test_it_lets_an_owner_remove_a_member(api_client_for, project, alice, bob):
    response = api_client_for(alice).delete(_url(project, "bob"))

    assert response.status_code == 204
    assert not Membership.objects.filter(project=project, user=bob).exists()
    event = AuditEvent.objects.get(action="membership_removed")
    assert event.data == {"user_id": bob.pk, "role": Role.MEMBER}
    assert api_client_for(bob).get(f"/projects/{project.pk}").status_code == 404


@pytest.mark.parametrize("who", ["bob", "vera"])
def test_it_refuses_removal_by_members_and_viewers(api_client_for, project, who, bob, vera):
    user = {"bob": bob, "vera": vera}[who]

    response = api_client_for(user).delete(_url(project, "alice"))

    assert response.status_code == 403
    assert Membership.objects.filter(project=project).count() == 3


def test_it_hides_the_project_from_strangers(api_client_for, project, charlie):
    assert api_client_for(charlie).delete(_url(project, "bob")).status_code == 404
    assert Membership.objects.filter(project=project).count() == 3


@pytest.mark.parametrize("username", ["charlie", "nobody", "%20", "b" * 300])
def test_it_answers_404_for_a_non_member(api_client_for, project, alice, charlie, username):
    response = api_client_for(alice).delete(_url(project, username))

    assert response.status_code == 404
    assert Membership.objects.filter(project=project).count() == 3


def test_it_keeps_the_last_owner(api_client_for, project, alice):
    response = api_client_for(alice).delete(_url(project, "alice"))

    assert response.status_code == 409
    assert Membership.objects.filter(project=project, user=alice, role=Role.OWNER).exists()


def test_it_lets_an_owner_leave_when_another_owner_stays(api_client_for, project, alice, bob):
    Membership.objects.filter(project=project, user=bob).update(role=Role.OWNER)

    assert api_client_for(alice).delete(_url(project, "alice")).status_code == 204
    assert not Membership.objects.filter(project=project, user=alice).exists()


def test_it_refuses_a_removed_users_task_key_at_the_next_call(
    api_client_for, running_task, project, alice, bob, memory_factory, auto_memory_on
):
    auto_memory_on(bob)
    memory = memory_factory(project=project, content="Deploys run with make deploy on staging.")
    task, key = running_task(project, bob)
    assert tool_search(key=key, query="deploy")["memories"][0]["id"] == memory.pk
    assert tool_get(key=key, memory_id=memory.pk)["memory"]["id"] == memory.pk

    assert api_client_for(alice).delete(_url(project, "bob")).status_code == 204

    with pytest.raises(KeyRefused, match="no longer a member"):
        tool_search(key=key, query="deploy")
    with pytest.raises(KeyRefused, match="no longer a member"):
        tool_get(key=key, memory_id=memory.pk)
    with pytest.raises(TaskKeyInvalid):
        task_key_authenticate(key=key)
    task.refresh_from_db()
    assert task.status == TaskStatus.RUNNING  # only its key is refused


def test_it_keeps_the_key_of_a_member_whose_role_changed(
    api_client_for, running_task, project, alice, bob
):
    task, key = running_task(project, bob)

    response = post_json(
        api_client_for(alice),
        f"/projects/{project.pk}/members",
        {"username": "bob", "role": "viewer"},
    )

    assert response.status_code == 200
    assert task_key_authenticate(key=key).pk == task.pk


def test_it_refuses_the_key_of_a_task_whose_user_never_was_a_member(running_task, project, charlie):
    _task, key = running_task(project, charlie)

    with pytest.raises(TaskKeyInvalid, match="no longer a member"):
        task_key_authenticate(key=key)


def test_it_authenticates_in_one_statement(running_task, project, bob, django_assert_num_queries):
    _task, key = running_task(project, bob)

    with django_assert_num_queries(1):
        assert task_key_authenticate(key=key).user.username == "bob"
