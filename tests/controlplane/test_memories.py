"""User-level and project-level memories through the API."""

import pytest

from controlplane.models import AuditEvent, IdentityMemory, MemoryScope, MemorySource

from .helpers import post_json

pytestmark = pytest.mark.django_db


def test_a_user_remembers_something_about_themself(api_client_for, alice):
    response = post_json(api_client_for(alice), "/users/me/memories", {"content": "I use vim."})

    assert response.status_code == 201
    body = response.json()
    assert (body["scope"], body["source"], body["status"]) == ("user", "manual", "active")
    assert body["source_thread_id"] is None
    memory = IdentityMemory.objects.get(pk=body["id"])
    assert (memory.user, memory.project, memory.created_by) == (alice, None, alice)
    assert AuditEvent.objects.filter(action="memory_created", target_id=str(memory.pk)).exists()


def test_a_user_lists_only_their_own_user_memories(
    api_client_for, alice, bob, project, memory_factory
):
    mine = memory_factory(user=alice, content="mine")
    memory_factory(user=bob, content="bob's")
    memory_factory(project=project, content="project's")

    body = api_client_for(alice).get("/users/me/memories").json()

    assert [m["id"] for m in body["results"]] == [mine.pk]


def test_a_member_adds_a_project_memory(api_client_for, project, bob):
    response = post_json(
        api_client_for(bob), f"/projects/{project.pk}/memories", {"content": "Deploy with make."}
    )

    assert response.status_code == 201
    memory = IdentityMemory.objects.get(pk=response.json()["id"])
    assert (memory.scope, memory.project, memory.source) == ("project", project, "manual")


def test_project_memories_show_status_source_and_source_thread_id(
    api_client_for, project, vera, task_factory, memory_factory
):
    task = task_factory(project, completed=True)
    auto = memory_factory(project=project, source=MemorySource.AUTO, source_task=task, goal_key="k")
    old = memory_factory(project=project, status="superseded")

    body = api_client_for(vera).get(f"/projects/{project.pk}/memories").json()

    rows = {m["id"]: m for m in body["results"]}
    assert rows[auto.pk]["source"] == "auto"
    assert rows[auto.pk]["source_thread_id"] == task.pk
    assert rows[auto.pk]["status"] == "active"
    assert rows[old.pk]["status"] == "superseded"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?status=active", {"manual-active", "auto-active"}),
        ("?status=superseded", {"manual-old"}),
        ("?source=auto", {"auto-active"}),
        ("?source=manual&status=active", {"manual-active"}),
        ("", {"manual-active", "auto-active", "manual-old"}),
    ],
)
def test_project_memories_filter_by_status_and_source(
    api_client_for, project, alice, task_factory, memory_factory, query, expected
):
    memory_factory(project=project, content="manual-active")
    memory_factory(project=project, content="manual-old", status="superseded")
    memory_factory(
        project=project,
        content="auto-active",
        source="auto",
        source_task=task_factory(project),
        goal_key="g",
    )

    body = api_client_for(alice).get(f"/projects/{project.pk}/memories{query}").json()

    assert {m["content"] for m in body["results"]} == expected


@pytest.mark.parametrize("query", ["?status=gone", "?source=robot", "?status=%00"])
def test_unknown_memory_filters_are_a_400(api_client_for, project, alice, query):
    response = api_client_for(alice).get(f"/projects/{project.pk}/memories{query}")

    assert response.status_code == 400


def test_memories_of_another_project_are_not_listed(
    api_client_for, project, project_factory, alice, memory_factory
):
    memory_factory(project=project_factory(alice, "other"), content="elsewhere")
    here = memory_factory(project=project, content="here")

    body = api_client_for(alice).get(f"/projects/{project.pk}/memories").json()

    assert [m["id"] for m in body["results"]] == [here.pk]


@pytest.mark.parametrize(
    "payload",
    [{}, {"content": ""}, {"content": "  "}, {"content": 3}, {"content": "x" * 20_001}],
)
def test_bad_memory_content_is_refused(api_client_for, project, alice, snapshot, payload):
    client = api_client_for(alice)
    before = snapshot()

    for path in ("/users/me/memories", f"/projects/{project.pk}/memories"):
        response = post_json(client, path, payload)
        assert response.status_code == 400
        assert "content" in response.json()
    assert snapshot() == before


def test_a_user_forgets_their_own_memory(api_client_for, alice, memory_factory):
    memory = memory_factory(user=alice)

    response = api_client_for(alice).delete(f"/memories/{memory.pk}")

    assert response.status_code == 204
    assert not IdentityMemory.objects.filter(pk=memory.pk).exists()
    assert AuditEvent.objects.filter(action="memory_deleted", target_id=str(memory.pk)).exists()


def test_nobody_else_can_forget_a_users_memory(api_client_for, alice, bob, memory_factory):
    memory = memory_factory(user=alice)

    assert api_client_for(bob).delete(f"/memories/{memory.pk}").status_code == 404
    assert IdentityMemory.objects.filter(pk=memory.pk).exists()


def test_a_member_forgets_an_auto_memory_of_the_project(
    api_client_for, project, bob, task_factory, memory_factory
):
    memory = memory_factory(
        project=project,
        scope=MemoryScope.PROJECT,
        source="auto",
        source_task=task_factory(project),
        goal_key="g",
    )

    assert api_client_for(bob).delete(f"/memories/{memory.pk}").status_code == 204
    assert not IdentityMemory.objects.filter(pk=memory.pk).exists()


def test_a_viewer_cannot_forget_a_project_memory(api_client_for, project, vera, memory_factory):
    memory = memory_factory(project=project)

    assert api_client_for(vera).delete(f"/memories/{memory.pk}").status_code == 403
    assert IdentityMemory.objects.filter(pk=memory.pk).exists()


@pytest.mark.parametrize("memory_id", ["999999", "abc", "1e3", "-1", "99999999999999999999999"])
def test_deleting_an_unknown_memory_is_a_404(api_client_for, alice, memory_id):
    assert api_client_for(alice).delete(f"/memories/{memory_id}").status_code == 404


# --- Secrets in hand-written memories -----------------------------------------------------------

PASSWORD = "Sup3rS3cretPassw0rd"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "a1B2c3"
SECRET_CONTENTS = [
    f"The staging db password={PASSWORD} (rotate monthly)",
    f"CI pushes with {GITHUB_TOKEN}",
]


@pytest.mark.parametrize("content", SECRET_CONTENTS, ids=["password", "github-token"])
def test_a_memory_holding_a_secret_is_refused_and_names_the_kind(
    api_client_for, project, alice, snapshot, content
):
    from automemory.services.redactor import secret_kinds

    kinds = secret_kinds(content)
    assert kinds, "the redactor recognises the secret"
    client = api_client_for(alice)
    before = snapshot()

    for path in ("/users/me/memories", f"/projects/{project.pk}/memories"):
        response = post_json(client, path, {"content": content})
        assert response.status_code == 400
        message = response.json()["content"][0]
        assert all(kind in message for kind in kinds)
        assert PASSWORD not in response.content.decode()
        assert GITHUB_TOKEN not in response.content.decode()
    assert snapshot() == before


def test_a_reference_to_where_a_secret_is_kept_is_accepted(api_client_for, alice):
    content = "The staging db password=${STAGING_DB_PASSWORD} comes from the vault"
    response = post_json(api_client_for(alice), "/users/me/memories", {"content": content})

    assert response.status_code == 201
    assert IdentityMemory.objects.get().content == content


@pytest.fixture
def admin_client(client, user_factory):
    root = user_factory("root", is_staff=True)
    root.is_superuser = True
    root.save()
    client.force_login(root)
    return client


def admin_memory_form(**fields) -> dict:
    values = {"scope": "user", "source": "manual", "status": "active"}
    return {**values, **fields}


def test_the_admin_refuses_a_new_memory_holding_a_secret(admin_client, alice):
    content = SECRET_CONTENTS[0]
    response = admin_client.post(
        "/admin/controlplane/identitymemory/add/",
        admin_memory_form(user=alice.pk, content=content),
    )

    assert response.status_code == 200, "the form is shown again with the error"
    assert "holds a secret" in response.content.decode()
    assert PASSWORD not in response.content.decode().replace(content, "")
    assert not IdentityMemory.objects.exists()


def test_the_admin_refuses_an_edit_that_adds_a_secret(admin_client, alice, memory_factory):
    memory = memory_factory(user=alice, content="Alice uses the staging db")

    response = admin_client.post(
        f"/admin/controlplane/identitymemory/{memory.pk}/change/",
        admin_memory_form(user=alice.pk, content=SECRET_CONTENTS[1]),
    )

    assert response.status_code == 200
    assert "holds a secret" in response.content.decode()
    memory.refresh_from_db()
    assert memory.content == "Alice uses the staging db"


def test_the_admin_saves_a_memory_without_secrets(admin_client, alice):
    response = admin_client.post(
        "/admin/controlplane/identitymemory/add/",
        admin_memory_form(user=alice.pk, content="  Alice prefers small commits  "),
    )

    assert response.status_code == 302
    assert IdentityMemory.objects.get().content == "Alice prefers small commits"


def test_the_admin_changes_other_fields_of_an_older_memory_without_rechecking_it(
    admin_client, alice, memory_factory
):
    older = memory_factory(user=alice, content=SECRET_CONTENTS[0])  # stored before the check

    response = admin_client.post(
        f"/admin/controlplane/identitymemory/{older.pk}/change/",
        admin_memory_form(user=alice.pk, content=older.content, status="superseded"),
    )

    assert response.status_code == 302
    older.refresh_from_db()
    assert older.status == "superseded"


def test_content_checks_are_registered_once_and_all_run(alice, monkeypatch):
    from controlplane.errors import DomainError
    from controlplane.services import memories

    monkeypatch.setattr(memories, "_content_checks", list(memories.memory_content_checks()))

    def no_shouting(content: str) -> str | None:
        return "No shouting." if content.isupper() else None

    memories.memory_content_check_register(no_shouting)
    memories.memory_content_check_register(no_shouting)

    assert memories.memory_content_checks().count(no_shouting) == 1
    with pytest.raises(DomainError) as refused:
        memories.memory_create(user=alice, content="DEPLOY NOW")
    assert refused.value.as_body() == {"content": ["No shouting."]}
    assert memories.memory_create(user=alice, content="Deploy now").pk
