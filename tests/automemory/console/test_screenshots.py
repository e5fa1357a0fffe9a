"""Every console page in the browser, on data the real sweep wrote: each page loads, has its
heading, raises no JavaScript error, and is photographed.

The screenshots go to the test's temporary folder; with `CONSOLE_SCREENSHOTS=1` they are also
written to docs/console/ (the pictures docs/console.md shows).
"""

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from automemory.models import AutoMemoryLog, MemoryState, Reason
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import IdentityMemory, MemorySource, MemoryStatus

DOCS_DIR = Path(__file__).resolve().parents[3] / "docs" / "console"
VIEWPORT = {"width": 1280, "height": 860}

FIX_RESULT = (
    "The upload test was flaky because two workers wrote the same temporary file. "
    "Each test now gets its own folder from tmp_path, and the upload handler closes the file "
    "before it renames it. Run `pytest tests/test_upload.py -n 4` to check: 40 runs passed."
)


@pytest.fixture
def console_story(
    project_factory,
    alice,
    bob,
    vera,
    task_factory,
    auto_memory_on,
    memory_factory,
    log_row_factory,
):
    """A project with the history a few weeks of use leave: memories the sweep wrote (one
    superseded by a later task on the same goal), manual and personal memories, a task that
    received memories, and log rows with several outcomes."""
    project = project_factory(alice, "shop-backend", members=[bob], viewers=[vera])
    auto_memory_on(alice, idle_seconds=0, min_duration_seconds=0)
    goal = "Fix the flaky upload test"
    first = task_factory(
        project,
        alice,
        prompt="Fix the flaky upload test\nIt fails about once in ten CI runs.",
        goal=goal,
        completed=True,
        finished_ago=timedelta(days=3),
        result_text="First look: " + FIX_RESULT,
    )
    process_auto_memories(user=alice)
    task_factory(
        project,
        alice,
        prompt="Fix the flaky upload test\nIt failed again on the release branch.",
        goal=goal,
        completed=True,
        finished_ago=timedelta(hours=2),
        result_text=FIX_RESULT,
    )
    task_factory(
        project,
        alice,
        prompt="Bump the version number",
        completed=True,
        result_text="Done.",
    )
    process_auto_memories(user=alice)
    reasons = set(AutoMemoryLog.objects.values_list("reason", flat=True))
    assert reasons == {Reason.NEW, Reason.SUPERSEDED, Reason.RESULT_TOO_SHORT}
    log_row_factory(
        task_factory(
            project,
            alice,
            prompt="Summarise the payment provider's API changes from their website",
            completed=True,
            parent_task=first,  # a coordinator's subtask: external context, never remembered
        ),
        reason=Reason.EXTERNAL_CONTEXT,
        detail="subtask of a coordinator",
        attempted_ago=timedelta(minutes=30),
    )
    log_row_factory(
        task_factory(project, alice, prompt="Add an index for the orders report", completed=True),
        reason=Reason.NOT_IDLE,
        attempted_ago=timedelta(minutes=2),
    )
    newest = IdentityMemory.objects.filter(
        project=project, source=MemorySource.AUTO, status=MemoryStatus.ACTIVE
    ).first()
    used_in = task_factory(
        project,
        bob,
        prompt="Add a retry to the upload client",
        completed=True,
        injected_memory_ids=[newest.pk],
    )
    MemoryState.objects.update_or_create(
        memory_id=newest.pk, defaults=dict(injection_count=4, last_injected_at=used_in.queued_at)
    )
    memory_factory(
        project=project,
        user=bob,
        content="Run `make test` before pushing: CI runs the suite on SQLite and PostgreSQL.",
    )
    memory_factory(user=alice, content="I prefer small commits with imperative messages.")
    return {"project": project, "memory": newest, "first_task": first, "used_in": used_in}


def _shoot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, name  # a rendered page, not a blank one
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        DOCS_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_DIR / path.name)


def test_every_page_renders_and_is_photographed(
    page, console_url, signed_in_page, console_story, alice, vera, charlie, tmp_path
):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_viewport_size(VIEWPORT)
    project = console_story["project"]
    memory = console_story["memory"]

    page.goto(console_url("/console/sign-in"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    _shoot(page, tmp_path, "sign-in")

    signed_in_page(alice)
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory console")
    _shoot(page, tmp_path, "home")

    pages = [
        ("projects", reverse("console:projects")),
        ("project-memories", reverse("console:project_memories", args=[project.pk])),
        ("memory", reverse("console:memory", args=[memory.pk])),
        ("memory-edit", reverse("console:memory_edit", args=[memory.pk])),
        ("memory-delete", reverse("console:memory_delete", args=[memory.pk])),
        ("my-memories", reverse("console:my_memories")),
        ("task", reverse("console:task", args=[console_story["used_in"].pk])),
        ("task-with-memory", reverse("console:task", args=[console_story["first_task"].pk])),
        ("settings", reverse("console:settings")),
        ("log", reverse("console:log")),
    ]
    for name, path in pages:
        response = page.goto(console_url(path))
        assert response.status == 200, (name, response.status)
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        _shoot(page, tmp_path, name)

    page.goto(console_url(reverse("console:log") + "?outcome=skipped"))
    expect(page.locator("tbody tr")).to_have_count(3)
    _shoot(page, tmp_path, "log-filtered")

    page.goto(console_url(reverse("console:log")))
    page.get_by_role("button", name="Run now, skip the waiting gates").click()
    expect(page.locator("#run-result")).to_contain_text("Sweep summary")
    _shoot(page, tmp_path, "run-now")

    page.goto(console_url(reverse("console:settings")))
    page.get_by_label("Minimum quota left (percent)").fill("150")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("alert")).to_contain_text("Nothing was saved")
    page.locator("#id_min_rate_limit_remaining_percent").scroll_into_view_if_needed()
    _shoot(page, tmp_path, "settings-error")

    signed_in_page(vera, reverse("console:project_memories", args=[project.pk]))
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    _shoot(page, tmp_path, "viewer-memories")

    signed_in_page(charlie, reverse("console:project_memories", args=[project.pk]))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Not found")
    _shoot(page, tmp_path, "stranger-not-found")

    assert errors == []
