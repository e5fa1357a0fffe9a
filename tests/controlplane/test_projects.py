"""Projects and memberships through the API."""

import pytest

from controlplane.models import AuditEvent, Membership, Project, Role

from .helpers import post_json

pytestmark = pytest.mark.django_db


def test_creating_a_project_makes_the_caller_its_owner(api_client_for, alice):
    response = api_client_for(alice).post("/projects", {"name": "  webapp "}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "webapp"
    assert body["role"] == "owner"
    assert body["created_by"] == "alice"
    project = Project.objects.get(pk=body["id"])
    assert Membership.objects.get(project=project, user=alice).role == Role.OWNER
    assert AuditEvent.objects.filter(action="project_created", target_id=str(project.pk)).exists()


def test_the_project_list_shows_only_the_callers_projects_with_their_role(
    api_client_for, project, project_factory, bob, charlie
):
    project_factory(charlie, "charlie's")

    body = api_client_for(bob).get("/projects").json()

    assert body["count"] == 1
    assert [(p["id"], p["role"]) for p in body["results"]] == [(project.pk, "member")]


def test_a_member_reads_a_project(api_client_for, project, vera):
    response = api_client_for(vera).get(f"/projects/{project.pk}")

    assert response.status_code == 200
    assert response.json()["role"] == "viewer"


def test_a_stranger_gets_404_for_a_project(api_client_for, project, charlie):
    assert api_client_for(charlie).get(f"/projects/{project.pk}").status_code == 404


def test_a_project_name_is_required_and_bounded(api_client_for, alice, snapshot):
    client = api_client_for(alice)
    before = snapshot()

    assert client.post("/projects", {}, format="json").json() == {
        "name": ["This field is required."]
    }
    assert "name" in client.post("/projects", {"name": "   "}, format="json").json()
    assert "name" in client.post("/projects", {"name": "x" * 201}, format="json").json()
    assert "name" in client.post("/projects", {"name": 12}, format="json").json()
    assert snapshot() == before


def test_the_owner_adds_a_member(api_client_for, project, alice, charlie):
    response = post_json(
        api_client_for(alice),
        f"/projects/{project.pk}/members",
        {"username": "charlie", "role": "viewer"},
    )

    assert response.status_code == 201
    assert response.json()["username"] == "charlie"
    assert Membership.objects.get(project=project, user=charlie).role == "viewer"
    assert api_client_for(charlie).get(f"/projects/{project.pk}").status_code == 200


def test_the_owner_changes_a_role(api_client_for, project, alice, vera):
    response = post_json(
        api_client_for(alice),
        f"/projects/{project.pk}/members",
        {"username": "vera", "role": "member"},
    )

    assert response.status_code == 200
    assert Membership.objects.get(project=project, user=vera).role == "member"
    assert AuditEvent.objects.filter(action="membership_set").count() == 1


def test_members_are_listed_for_any_member(api_client_for, project, vera):
    body = api_client_for(vera).get(f"/projects/{project.pk}/members").json()

    assert [(m["username"], m["role"]) for m in body["results"]] == [
        ("alice", "owner"),
        ("bob", "member"),
        ("vera", "viewer"),
    ]


def test_the_last_owner_cannot_be_demoted(api_client_for, project, alice, snapshot):
    before = snapshot()

    response = post_json(
        api_client_for(alice),
        f"/projects/{project.pk}/members",
        {"username": "alice", "role": "member"},
    )

    assert response.status_code == 409
    assert Membership.objects.get(project=project, user=alice).role == "owner"
    assert snapshot() == before


def test_an_owner_can_step_down_once_there_is_another_owner(api_client_for, project, alice, bob):
    client = api_client_for(alice)
    post_json(client, f"/projects/{project.pk}/members", {"username": "bob", "role": "owner"})

    response = post_json(
        client, f"/projects/{project.pk}/members", {"username": "alice", "role": "viewer"}
    )

    assert response.status_code == 200
    assert Membership.objects.get(project=project, user=alice).role == "viewer"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"username": "nobody", "role": "member"}, "username"),
        ({"username": "charlie", "role": "admin"}, "role"),
        ({"username": "charlie"}, "role"),
        ({"role": "member"}, "username"),
        ({"username": ["charlie"], "role": "member"}, "username"),
        ({"username": "char\x00lie", "role": "member"}, "username"),
    ],
)
def test_bad_member_input_names_the_field(
    api_client_for, project, alice, charlie, snapshot, payload, field
):
    before = snapshot()

    response = post_json(api_client_for(alice), f"/projects/{project.pk}/members", payload)

    assert response.status_code == 400
    assert field in response.json()
    assert snapshot() == before


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_owners_demoting_each_other_at_once_leave_one_owner(project, alice, bob):
    """Both requests race on the project row lock; the second sees one owner left: 409."""
    import threading

    from django.db import connection
    from rest_framework.test import APIClient

    from controlplane.services.tokens import token_create

    Membership.objects.filter(project=project, user=bob).update(role=Role.OWNER)
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def demote(actor, target):
        client = APIClient()
        key = token_create(user=actor, name="race").key
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        barrier.wait()
        try:
            response = post_json(
                client, f"/projects/{project.pk}/members", {"username": target, "role": "member"}
            )
            codes.append(response.status_code)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=demote, args=(alice, "bob")),
        threading.Thread(target=demote, args=(bob, "alice")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(codes) == [200, 409]
    assert Membership.objects.filter(project=project, role=Role.OWNER).count() == 1
