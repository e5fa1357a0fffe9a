"""Memories whose cited code changed: left out until revalidated by the author's model
(keep, update, retire, against the fake OpenAI server) or, without a model, by a project
owner in the console's Needs review list, old and new lines side by side."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from automemory.models import MemoryCitation
from automemory.services.citations.revalidation import (
    REVALIDATION_SCHEMA,
    stale_memories_revalidate,
)
from controlplane.models import IdentityMemory, MemoryStatus, UsageKind, UsageRecord
from tests.automemory.citation_helpers import cited_memory, code_view, injected
from tests.automemory.conftest import CLIENT_PY
from tests.automemory.fake_openai import answer, http_error

pytestmark = pytest.mark.django_db

MODEL = "gpt-5-mini"


@pytest.fixture(autouse=True)
def _always_fetch(settings):
    settings.AUTOMEMORY_CITATION_MIRROR_REFRESH_SECONDS = 0


@pytest.fixture
def task(task_factory, code_project, alice, auto_memory_on):
    auto_memory_on(alice)
    return task_factory(code_project, alice, prompt="Fix the client", branch="main")


@pytest.fixture
def stale(task, code_project, alice, code_remote):
    """A memory citing lines that then changed, found stale by an injection."""
    memory = cited_memory(code_project, alice, "step_20 returns 20.", ("api/client.py", 39, 40))
    code_remote.commit({"api/client.py": CLIENT_PY.replace("return 20", "return 21")})
    assert f"#{memory.pk}" not in injected(task, code_view(code_project, code_remote))
    assert MemoryCitation.objects.get(memory=memory).state == "changed"
    return memory


def decision(action, text="", citations=()):
    return answer(
        {
            "reason": "the code moved on",
            "action": action,
            "text": text,
            "citations": list(citations),
        }
    )


def test_the_model_keeps_it_and_it_is_injected_again_at_the_new_code(
    stale, task, code_project, code_remote, auto_memory_on, alice, fake_openai
):
    auto_memory_on(alice, consolidation_model=MODEL)
    fake_openai.respond_with(decision("keep"))

    summary = stale_memories_revalidate()

    assert summary.kept == 1
    citation = MemoryCitation.objects.get(memory=stale)
    assert (citation.state, citation.commit) == ("fresh", code_remote.head())
    assert f"#{stale.pk} step_20 returns 20." in injected(
        task, code_view(code_project, code_remote)
    )
    (request,) = fake_openai.completion_requests
    assert request.body["response_format"]["json_schema"]["schema"] == REVALIDATION_SCHEMA
    assert "return 20" in request.text and "return 21" in request.text
    assert UsageRecord.objects.filter(kind=UsageKind.MEMORY_CONSOLIDATION, user=alice).count() == 1


def test_the_model_updates_its_text_and_citations_dropping_bad_ones(
    stale, task, code_project, code_remote, auto_memory_on, alice, fake_openai
):
    auto_memory_on(alice, consolidation_model=MODEL)
    fake_openai.respond_with(
        decision(
            "update",
            "step_20 returns 21 now.",
            [
                {"path": "api/client.py", "start_line": 39, "end_line": 40},
                {"path": "/etc/passwd", "start_line": 1, "end_line": 1},
                {"path": "api/client.py", "start_line": 5, "end_line": 10**9},
            ],
        )
    )

    assert stale_memories_revalidate().updated == 1

    stale.refresh_from_db()
    assert stale.content == "step_20 returns 21 now."
    (citation,) = MemoryCitation.objects.filter(memory=stale)
    assert (citation.start_line, citation.end_line, citation.state) == (39, 40, "fresh")
    assert "step_20 returns 21 now." in injected(task, code_view(code_project, code_remote))


def test_the_model_retires_it(
    stale, task, code_project, code_remote, auto_memory_on, alice, fake_openai
):
    auto_memory_on(alice, consolidation_model=MODEL)
    fake_openai.respond_with(decision("retire"))

    assert stale_memories_revalidate().retired == 1

    stale.refresh_from_db()
    assert stale.status == MemoryStatus.ARCHIVED
    assert f"#{stale.pk}" not in injected(task, code_view(code_project, code_remote))


def test_a_failing_model_leaves_it_out_for_the_next_pass(
    stale, task, code_project, code_remote, auto_memory_on, alice, fake_openai
):
    auto_memory_on(alice, consolidation_model=MODEL)
    fake_openai.respond_with(http_error(500))

    summary = stale_memories_revalidate()

    assert summary.waiting == 1 and summary.kept == summary.updated == summary.retired == 0
    assert MemoryCitation.objects.get(memory=stale).state == "changed"
    assert f"#{stale.pk}" not in injected(task, code_view(code_project, code_remote))


def test_without_a_model_it_waits_in_needs_review_with_old_and_new_lines(
    stale, task, code_project, code_remote, alice, bob
):
    assert stale_memories_revalidate().waiting == 1
    owner = Client()
    owner.force_login(alice)
    review = reverse("console:project_review", args=[code_project.pk])

    page = owner.get(review).content.decode()
    detail = owner.get(reverse("console:memory", args=[stale.pk])).content.decode()
    assert "api/client.py:39-40" in detail and "the code it cites changed" in detail

    assert "The code it cites changed" in page
    assert "step_20 returns 20." in page
    assert "return 20" in page and "return 21" in page  # then and now, side by side
    assert "api/client.py:39-40" in page
    # A member who is not an owner may not decide.
    member = Client()
    member.force_login(bob)
    keep = reverse("console:memory_code_keep", args=[stale.pk])
    assert member.post(keep).status_code in (403, 404)
    assert MemoryCitation.objects.get(memory=stale).state == "changed"

    done = owner.post(keep, {"next": review})

    assert done.status_code == 302 and done["Location"] == review
    assert MemoryCitation.objects.get(memory=stale).state == "fresh"
    assert "The code it cites changed" not in owner.get(review).content.decode()
    assert f"#{stale.pk} step_20 returns 20." in injected(
        task, code_view(code_project, code_remote)
    )


def test_an_owner_retires_it_from_needs_review(stale, code_project, alice):
    owner = Client()
    owner.force_login(alice)

    owner.post(reverse("console:memory_code_retire", args=[stale.pk]))

    assert IdentityMemory.objects.get(pk=stale.pk).status == MemoryStatus.ARCHIVED


def test_the_console_edit_form_changes_text_and_citations_together(stale, code_project, alice):
    owner = Client()
    owner.force_login(alice)
    edit = reverse("console:memory_edit", args=[stale.pk])
    assert "api/client.py:39-40" in owner.get(edit).content.decode()

    refused = owner.post(edit, {"content": "changed text", "citations": "api/client.py:70-99"})
    assert refused.status_code == 400
    assert "Line 1: the file has 80 lines" in refused.content.decode(), re.findall(
        r"field-error.*|message-error.*", refused.content.decode()
    )
    stale.refresh_from_db()
    assert stale.content == "step_20 returns 20."  # nothing half-written

    saved = owner.post(edit, {"content": "step_20 returns 21.", "citations": "api/client.py:39-40"})

    assert saved.status_code == 302
    citation = MemoryCitation.objects.get(memory=stale)
    assert citation.state == "fresh" and citation.start_line == 39
