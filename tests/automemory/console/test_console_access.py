"""Who sees and changes what on the console's memory and task pages, one test per role.

The pages use the API's access rules (`controlplane.access`): owners and members read and
change, viewers only read, a stranger gets 404 (the object does not exist for them) and an
anonymous visitor is sent to the sign-in page.
"""

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from automemory.models import MemorySourceTask, TaskAutoMemoryFlags
from controlplane.models import IdentityMemory, MemoryScope, MemorySource
from tests.conftest import memory_stored, memory_usage_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(project, task_factory, alice):
    """alice's project (bob member, vera viewer) with a completed task, its auto memory (flagged
    and awaiting approval) and alice's own user-level memory."""
    task = task_factory(project, alice, completed=True, prompt="Speed up the build")
    memory = memory_stored(
        scope=MemoryScope.PROJECT,
        project=project,
        content="The build uses a warm cache in CI.",
        source=MemorySource.AUTO,
        source_task=task,
        goal_key="build",
        flagged=True,
        instruction_flags=["override_instructions"],
    )
    MemorySourceTask.objects.create(memory=memory, task=task)
    personal = IdentityMemory.objects.create(
        scope=MemoryScope.USER, user=alice, content="alice likes short names", created_by=alice
    )
    return {"project": project, "task": task, "memory": memory, "personal": personal}


def _read_urls(world):
    return [
        reverse("console:project_memories", args=[world["project"].pk]),
        reverse("console:memory", args=[world["memory"].pk]),
        reverse("console:task", args=[world["task"].pk]),
    ]


def _change_urls(world):
    return [
        reverse("console:memory_edit", args=[world["memory"].pk]),
        reverse("console:memory_delete", args=[world["memory"].pk]),
    ]


def test_owner_reads_changes_and_approves(client, world, alice):
    client.force_login(alice)
    for url in _read_urls(world) + _change_urls(world):
        assert client.get(url).status_code == 200, url
    page = client.get(reverse("console:memory", args=[world["memory"].pk])).content.decode()
    assert reverse("console:memory_edit", args=[world["memory"].pk]) in page
    assert reverse("console:memory_approve", args=[world["memory"].pk]) in page
    response = client.post(reverse("console:memory_approve", args=[world["memory"].pk]))
    assert response.status_code == 302
    assert memory_usage_of(world["memory"]).approved_by == alice


def test_member_reads_and_changes_but_may_not_approve(client, world, bob):
    client.force_login(bob)
    for url in _read_urls(world) + _change_urls(world):
        assert client.get(url).status_code == 200, url
    page = client.get(reverse("console:memory", args=[world["memory"].pk])).content.decode()
    assert reverse("console:memory_edit", args=[world["memory"].pk]) in page
    assert reverse("console:memory_approve", args=[world["memory"].pk]) not in page
    response = client.post(reverse("console:memory_approve", args=[world["memory"].pk]))
    assert response.status_code == 403
    assert memory_usage_of(world["memory"]).approved_at is None
    response = client.post(
        reverse("console:task_flags", args=[world["task"].pk]),
        {"use_memories": "off", "generate_memories": "off"},
    )
    assert response.status_code == 302
    flags = TaskAutoMemoryFlags.objects.get(task=world["task"])
    assert (flags.use_memories, flags.generate_memories) == (False, False)


def test_viewer_reads_only(client, world, vera):
    client.force_login(vera)
    for url in _read_urls(world):
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        assert reverse("console:memory_edit", args=[world["memory"].pk]) not in body
        assert reverse("console:memory_delete", args=[world["memory"].pk]) not in body
        assert reverse("console:task_flags", args=[world["task"].pk]) not in body
    for url in _change_urls(world):
        assert client.get(url).status_code == 403, url
    memory = world["memory"]
    assert (
        client.post(reverse("console:memory_edit", args=[memory.pk]), {"content": "x y z"})
    ).status_code == 403
    assert client.post(reverse("console:memory_delete", args=[memory.pk])).status_code == 403
    assert client.post(reverse("console:memory_approve", args=[memory.pk])).status_code == 403
    assert client.post(reverse("console:memory_restore", args=[memory.pk])).status_code == 403
    response = client.post(
        reverse("console:task_flags", args=[world["task"].pk]),
        {"use_memories": "on", "generate_memories": "on"},
    )
    assert response.status_code == 403
    memory.refresh_from_db()
    assert memory.content == "The build uses a warm cache in CI."
    assert not TaskAutoMemoryFlags.objects.filter(task=world["task"]).exists()


def test_stranger_gets_404_everywhere(client, world, charlie):
    client.force_login(charlie)
    for url in _read_urls(world) + _change_urls(world):
        assert client.get(url).status_code == 404, url
    memory = world["memory"]
    for name in ("memory_edit", "memory_delete", "memory_approve", "memory_restore"):
        assert client.post(reverse(f"console:{name}", args=[memory.pk])).status_code == 404
    response = client.post(
        reverse("console:task_flags", args=[world["task"].pk]),
        {"use_memories": "on", "generate_memories": "on"},
    )
    assert response.status_code == 404
    assert IdentityMemory.objects.filter(pk=memory.pk).exists()
    projects = client.get(reverse("console:projects")).content.decode()
    assert world["project"].name not in projects


def test_anonymous_is_sent_to_sign_in(client, world):
    sign_in = reverse("console:sign-in")
    urls = _read_urls(world) + _change_urls(world)
    urls += [reverse("console:projects"), reverse("console:my_memories")]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(sign_in + "?next="), url
    response = client.post(reverse("console:memory_delete", args=[world["memory"].pk]))
    assert response.status_code == 302
    assert IdentityMemory.objects.filter(pk=world["memory"].pk).exists()


def test_a_user_level_memory_exists_only_for_its_user(client, world, alice, bob):
    personal = world["personal"]
    client.force_login(bob)
    for name in ("memory", "memory_edit", "memory_delete"):
        assert client.get(reverse(f"console:{name}", args=[personal.pk])).status_code == 404
    assert client.post(reverse("console:memory_delete", args=[personal.pk])).status_code == 404
    assert (
        "alice likes short names" not in client.get(reverse("console:my_memories")).content.decode()
    )
    scoped = client.get(
        reverse("console:project_memories", args=[world["project"].pk]), {"scope": "user"}
    )
    assert "alice likes short names" not in scoped.content.decode()
    client.force_login(alice)
    assert client.get(reverse("console:memory", args=[personal.pk])).status_code == 200
    assert "alice likes short names" in client.get(reverse("console:my_memories")).content.decode()


# --- In a real browser ------------------------------------------------------------------------


def test_browser_viewer_sees_read_only_pages(signed_in_page, console_url, world, vera):
    memory, task = world["memory"], world["task"]
    page = signed_in_page(vera, f"/console/projects/{world['project'].pk}/memories")
    expect(page.get_by_text("You can read these memories")).to_be_visible()
    row = page.locator(f"#memory-{memory.pk}")
    expect(row).to_contain_text("The build uses a warm cache in CI.")
    expect(row.get_by_role("link", name=f"task {task.pk}")).to_be_visible()
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)
    expect(page.get_by_role("link", name="Delete")).to_have_count(0)

    row.get_by_role("link", name=f"Memory {memory.pk}", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Memory {memory.pk}")
    expect(page.get_by_text("You are a viewer of this project")).to_be_visible()
    # A viewer may only report a memory.
    expect(page.get_by_role("button")).to_have_text(["Sign out", "Report"])

    page.get_by_role("link", name=f"Task {task.pk}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Task {task.pk}")
    expect(
        page.get_by_text("Only the project's owners and members can change them")
    ).to_be_visible()
    expect(page.get_by_role("radio")).to_have_count(0)

    response = page.goto(console_url(f"/console/memories/{memory.pk}/edit"))
    assert response.status == 403


def test_browser_stranger_gets_404(signed_in_page, console_url, world, charlie):
    page = signed_in_page(charlie, "/console/projects")
    expect(page.get_by_role("link", name="webapp")).to_have_count(0)
    for path in (
        f"/console/projects/{world['project'].pk}/memories",
        f"/console/memories/{world['memory'].pk}",
        f"/console/memories/{world['personal'].pk}",
        f"/console/tasks/{world['task'].pk}",
    ):
        response = page.goto(console_url(path))
        assert response.status == 404, path
        expect(page.get_by_text("The build uses a warm cache")).to_have_count(0)
