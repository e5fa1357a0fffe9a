"""The console's task page: prompt, turns and status, injected memories (deleted and private
ones said so), the memory the task produced with the log row explaining it, and the task's
auto memory flags (create_task permission, as the API)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from automemory.console.explanations import reason_explanation
from automemory.models import AutoMemoryLog, AutoMemorySettings, TaskAutoMemoryFlags
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemorySource,
    TaskFollowup,
    UsageRecord,
)

pytestmark = pytest.mark.django_db


def task_url(task):
    return reverse("console:task", args=[task.pk])


def flags_url(task):
    return reverse("console:task_flags", args=[task.pk])


def test_shows_prompt_status_turns_and_messages(client, project, task_factory, alice, bob):
    task = task_factory(
        project,
        alice,
        completed=True,
        prompt="Add a health endpoint",
        goal="Ship /healthz",
        turn=2,
        continuation_prompt="Also add /readyz",
        result_text="Added /healthz and /readyz.",
    )
    sender = task_factory(project, bob, prompt="coordinator")
    TaskFollowup.objects.create(task=task, from_task=sender, message="Use the shared router")
    for turn, cost in ((1, "0.0100"), (2, "0.0200")):
        UsageRecord.objects.create(
            user=alice,
            task=task,
            project=project,
            turn=turn,
            executor="codex",
            model="gpt-5",
            cost_usd=Decimal(cost),
            finished_at=timezone.now(),
        )
    client.force_login(bob)
    response = client.get(task_url(task))
    assert response.status_code == 200
    body = response.content.decode()
    for text in (
        "Add a health endpoint",
        "Ship /healthz",
        "Also add /readyz",
        "Added /healthz and /readyz.",
        "completed",
        "Use the shared router",
        "$0.0200",
        "gpt-5",
    ):
        assert text in body, text
    assert task_url(sender) in body
    assert body.count("<td>codex") == 2


def test_injected_memories_link_deleted_and_private(client, project, task_factory, alice, bob):
    shared = IdentityMemory.objects.create(
        scope=MemoryScope.PROJECT, project=project, content="Shared project fact", created_by=bob
    )
    private = IdentityMemory.objects.create(
        scope=MemoryScope.USER, user=alice, content="alice's private fact", created_by=alice
    )
    gone = IdentityMemory.objects.create(
        scope=MemoryScope.PROJECT, project=project, content="Forgotten fact", created_by=bob
    )
    gone_id = gone.pk
    gone.delete()
    task = task_factory(
        project,
        alice,
        completed=True,
        injected_memory_ids=[shared.pk, private.pk, gone_id, "junk", -3, True],
    )

    client.force_login(bob)
    body = client.get(task_url(task)).content.decode()
    assert reverse("console:memory", args=[shared.pk]) in body
    assert "Shared project fact" in body
    assert reverse("console:memory", args=[private.pk]) not in body
    assert "private fact" not in body
    assert f'Memory {private.pk} <span class="muted">(another user\'s own memory: private)' in body
    assert f'Memory {gone_id} <span class="badge badge-deleted">deleted</span>' in body

    client.force_login(alice)
    own = client.get(task_url(task)).content.decode()
    assert reverse("console:memory", args=[private.pk]) in own
    assert "alice&#x27;s private fact" in own


def test_produced_memory_with_the_log_row_that_explains_it(client, project, task_factory, alice):
    AutoMemorySettings.objects.create(user=alice, generate_memories=True)
    task = task_factory(project, alice, completed=True, prompt="Explain the deploy")
    short = task_factory(project, alice, completed=True, prompt="Tiny", result_text="ok")
    process_auto_memories(user=alice, force=False)
    memory = IdentityMemory.objects.get(source_task=task, source=MemorySource.AUTO)
    log = AutoMemoryLog.objects.get(task=task)

    client.force_login(alice)
    body = client.get(task_url(task)).content.decode()
    assert reverse("console:memory", args=[memory.pk]) in body
    assert f"<code>{log.reason}</code>" in body
    assert reason_explanation(log.reason) in body

    skipped = client.get(task_url(short)).content.decode()
    short_log = AutoMemoryLog.objects.get(task=short)
    assert short_log.outcome == "skipped"
    assert f"<code>{short_log.reason}</code>" in skipped
    assert reason_explanation(short_log.reason) in skipped

    memory.delete()
    after = client.get(task_url(task)).content.decode()
    assert "has since been deleted" in after


def test_a_task_not_looked_at_yet_says_so(client, project, task_factory, alice):
    task = task_factory(project, alice)
    client.force_login(alice)
    body = client.get(task_url(task)).content.decode()
    assert "has not looked at this task yet" in body
    assert "No run is recorded yet" in body
    assert "It has not run yet" in body
    finished = task_factory(project, alice, completed=True)
    body = client.get(task_url(finished)).content.decode()
    assert "No run of this task is recorded in the usage ledger" in body
    assert "Its first turn ran without memories" in body


def test_flags_toggle_follow_on_off(client, project, task_factory, alice):
    AutoMemorySettings.objects.create(user=alice, use_memories=True, generate_memories=False)
    task = task_factory(project, alice, completed=True, finished_ago=timedelta(days=1))
    client.force_login(alice)
    page = client.get(task_url(task)).content.decode()
    assert 'value="follow"' in page and "checked" in page

    response = client.post(flags_url(task), {"use_memories": "off", "generate_memories": "on"})
    assert response.status_code == 302 and response["Location"] == task_url(task)
    flags = TaskAutoMemoryFlags.objects.get(task=task)
    assert (flags.use_memories, flags.generate_memories, flags.updated_by) == (False, True, alice)
    page = client.get(task_url(task)).content.decode()
    assert "use memories <strong>off</strong>" in page
    assert "generate a memory <strong>on</strong>" in page

    client.post(flags_url(task), {"use_memories": "follow", "generate_memories": "follow"})
    flags.refresh_from_db()
    assert (flags.use_memories, flags.generate_memories) == (None, None)


def test_flags_change_rechecks_a_stable_skip(client, project, task_factory, alice):
    task = task_factory(project, alice, completed=True)
    process_auto_memories(user=alice, force=True)
    log = AutoMemoryLog.objects.get(task=task)
    assert (log.reason, log.recheck) == ("generate_disabled", False)
    client.force_login(alice)
    client.post(flags_url(task), {"use_memories": "follow", "generate_memories": "on"})
    log.refresh_from_db()
    assert log.recheck is True
    process_auto_memories(user=alice, force=True)
    assert IdentityMemory.objects.filter(source_task=task).exists()


@pytest.mark.parametrize(
    "data",
    [
        {"use_memories": "maybe", "generate_memories": "on"},
        {"use_memories": "on"},
        {},
        {"use_memories": "true", "generate_memories": "1"},
        {"use_memories": "x" * 10_000, "generate_memories": "on"},
    ],
)
def test_bad_flag_values_are_a_400_and_change_nothing(client, project, task_factory, alice, data):
    task = task_factory(project, alice)
    client.force_login(alice)
    response = client.post(flags_url(task), data)
    assert response.status_code == 400
    assert "field-error" in response.content.decode()
    assert not TaskAutoMemoryFlags.objects.filter(task=task).exists()


def test_flags_need_post_and_csrf(project, task_factory, alice):
    from django.test import Client

    task = task_factory(project, alice)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get(flags_url(task)).status_code == 405
    response = client.post(flags_url(task), {"use_memories": "on", "generate_memories": "on"})
    assert response.status_code == 403
    assert not TaskAutoMemoryFlags.objects.filter(task=task).exists()


# --- In a real browser ------------------------------------------------------------------------


def test_browser_task_page_and_flags_toggle(signed_in_page, project, task_factory, alice, bob):
    shared = IdentityMemory.objects.create(
        scope=MemoryScope.PROJECT, project=project, content="Use the staging DB", created_by=bob
    )
    task = task_factory(
        project,
        alice,
        completed=True,
        prompt="Migrate the orders table",
        injected_memory_ids=[shared.pk, shared.pk + 1000],
    )
    page = signed_in_page(bob, f"/console/tasks/{task.pk}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Task {task.pk}")
    expect(page.get_by_text("Migrate the orders table")).to_be_visible()
    expect(page.get_by_role("link", name=f"Memory {shared.pk}")).to_be_visible()
    expect(page.get_by_text("deleted", exact=True)).to_be_visible()

    use = page.get_by_role("group", name="Use memories")
    generate = page.get_by_role("group", name="Generate a memory")
    expect(use.get_by_label("Follow the setting")).to_be_checked()
    expect(page.get_by_text("the settings of alice, who created the task")).to_be_visible()
    use.get_by_label("Off").check()
    generate.get_by_label("On").check()
    page.get_by_role("button", name="Save flags").click()
    # Another member may turn alice's switches off, not on against her own setting.
    expect(page.get_by_text("Only the task's user may turn this on").first).to_be_visible()
    assert not TaskAutoMemoryFlags.objects.filter(task=task).exists()
    page.get_by_role("group", name="Generate a memory").get_by_label("Off").check()
    page.get_by_role("button", name="Save flags").click()
    expect(page.get_by_role("status")).to_contain_text("Auto memory flags saved")
    expect(page.get_by_role("group", name="Use memories").get_by_label("Off")).to_be_checked()
    flags = TaskAutoMemoryFlags.objects.get(task=task)
    assert (flags.use_memories, flags.generate_memories) == (False, False)

    page.get_by_role("link", name=f"Memory {shared.pk}").click()
    expect(page.locator("pre.memory-text")).to_have_text("Use the staging DB")


def test_project_page_links_its_recent_tasks(client, project, task_factory, alice, bob):
    tasks = [task_factory(project, alice if i % 2 else bob, prompt=f"job {i}") for i in range(12)]
    client.force_login(bob)
    body = client.get(reverse("console:project_memories", args=[project.pk])).content.decode()
    for task in tasks[2:]:
        assert f'href="{task_url(task)}"' in body
    for task in tasks[:2]:
        assert f'href="{task_url(task)}"' not in body


def test_a_task_on_a_repository_shows_its_branch_changed_files_and_diff(
    client, project, task_factory, alice, vera
):
    from controlplane.models import Repository, TaskDiff

    Repository.objects.create(project=project, url="git@h.example:a.git", default_branch="main")
    task = task_factory(
        project,
        alice,
        completed=True,
        branch="main",
        base_commit="a" * 40,
        head_commit="b" * 40,
        changed_files=[
            {"path": "src/app.py", "status": "modified"},
            {"path": "docs/été <b>.md", "status": "added"},
        ],
    )
    diff = (
        "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n"
        "@@ -1 +1 @@\n-print('hello')\n+print('<script>alert(1)</script>')\n"
    )
    TaskDiff.objects.create(
        task=task,
        base_commit="a" * 40,
        head_commit="b" * 40,
        diff=diff,
        diff_bytes=len(diff),
        files_changed=2,
        updated_at=timezone.now(),
    )
    client.force_login(vera)
    page = client.get(task_url(task)).content.decode()
    assert '<h2 id="code">Code</h2>' in page
    assert "controlplane/task-" in page and "b" * 40 in page
    assert "<code>docs/été &lt;b&gt;.md</code>" in page
    assert '<span class="diff-removed">-print(&#x27;hello&#x27;)</span>' in page
    assert (
        '<span class="diff-added">+print(&#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;)' in page
    )
    assert "<script>alert(1)" not in page


def test_a_task_without_a_repository_has_no_code_section(client, project, task_factory, alice):
    task = task_factory(project, alice, completed=True)
    client.force_login(alice)
    assert 'id="code"' not in client.get(task_url(task)).content.decode()


def test_a_long_diff_is_shown_in_part_with_a_link_to_the_whole(
    client, project, task_factory, alice
):
    from controlplane.models import TaskDiff

    task = task_factory(project, alice, completed=True, branch="main", head_commit="c" * 40)
    text = "".join(f"+line {n}\n" for n in range(5000))
    TaskDiff.objects.create(
        task=task,
        base_commit="a" * 40,
        head_commit="c" * 40,
        diff=text,
        diff_bytes=len(text),
        files_changed=1,
        updated_at=timezone.now(),
    )
    client.force_login(alice)
    page = client.get(task_url(task)).content.decode()
    assert "+line 2999</span>" in page and "+line 3000<" not in page
    assert "2000 more lines" in page and f'href="/tasks/{task.pk}/diff"' in page
