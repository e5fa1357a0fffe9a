"""A user's private memories never reach what another project member can read.

Alice's user-level memories are injected into her task in a project she shares with Bob; an
agent echoes the prompt in every way agents do; what the sweep writes (project memories, the
log) and what the audit log holds must not contain any of it.
"""

import json
import re
import textwrap

import pytest

from automemory.models import AutoMemoryLog
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.injector import inject_memories
from automemory.services.memory_block import render_memory_block
from automemory.services.provenance import (
    fence_begin,
    fence_end,
    injected_text_removed,
    memory_fingerprint,
)
from controlplane.models import AuditEvent, IdentityMemory, MemorySource, Task, TaskFollowup
from controlplane.textnorm import text_as_read

# Each private memory carries a word found nowhere else, so "any part of it" is checkable.
PAGER = "Alice keeps the zanzibar pager rotation notes in the blue notebook under her desk"
HEALTH = "Alice sees a physiotherapist for her quokka-shaped knee every Tuesday afternoon"
SHORT = "Prefers marimba ringtones"
PRIVATE_WORDS = ("zanzibar", "quokka", "marimba")
PROJECT_NOTE = "The API lives in api/ and deploys with make release"
WORK = "Fixed the login bug: the session check now compares expiry in UTC."


def memory(*, user=None, project=None, content, **fields):
    return IdentityMemory.objects.create(
        scope="user" if user is not None else "project",
        user=user,
        project=project,
        content=content,
        **fields,
    )


@pytest.fixture
def private(alice):
    return [memory(user=alice, content=text) for text in (PAGER, HEALTH, SHORT)]


OPEN_GATES = {"idle_seconds": 0, "min_duration_seconds": 0, "min_result_chars": 0}


@pytest.fixture
def on(alice, bob, auto_memory_on):
    for user in (alice, bob):
        auto_memory_on(user, **OPEN_GATES)


def injected_prompt(task) -> str:
    """What the worker hands the agent: the real injection of the task's first turn."""
    result = inject_memories(task=task, prompt=task.prompt, goal=task.goal, actor_label="test")
    assert result.memory_ids, "the test needs something injected"
    return result.prompt


def finish(task, result_text: str) -> Task:
    Task.objects.filter(pk=task.pk).update(result_text=result_text)
    task.refresh_from_db()
    return task


def quoted(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.splitlines())


def everything_bob_can_read(api_client_for, bob, project) -> str:
    """Project memories through Bob's API, and every log and audit row in the database."""
    client = api_client_for(bob)
    memories = client.get(f"/projects/{project.pk}/memories?page_size=100").json()["results"]
    logs = list(AutoMemoryLog.objects.values("detail", "reason"))
    audit = list(AuditEvent.objects.values("action", "data"))
    return json.dumps([memories, logs, audit], default=str).casefold()


def assert_nothing_private(text: str) -> None:
    for word in PRIVATE_WORDS:
        assert word not in text, f"{word!r} leaked"


QUOTING_STYLES = {
    "prefix": lambda p: f"Result for: {p}\n\n{WORK}",
    "middle-quote": lambda p: f'I read the task:\n"{p}"\nand then:\n{WORK}',
    "quoted-every-line": lambda p: f"{quoted(p)}\n\n{WORK}",
    "indented": lambda p: f"Input was:\n{textwrap.indent(p, '        ')}\n{WORK}",
    "wrapped": lambda p: f"{textwrap.fill(p, width=37)}\n{WORK}",
    "nested": lambda p: f"Result for: {quoted('Result for: ' + quoted(p))}\n{WORK}",
    "repeated": lambda p: f"{p}\n{WORK}\n{p}\nAgain: {p}",
    "shouted": lambda p: f"{p.upper()}\n{WORK}",
    "without-markers": lambda p: f"Context I used: {PAGER.lower()}; {HEALTH}. {SHORT}!\n{WORK}",
}


def between_letters(text: str, invisible: str) -> str:
    return re.sub(r"(?<=\w)(?=\w)", invisible, text)


def in_tags(text: str) -> str:
    """`text` in Unicode tag characters: invisible on screen, read by a model."""
    return "".join(chr(0xE0000 + ord(c)) if 0x20 <= ord(c) < 0x7F else c for c in text)


# An agent disguising the private text it echoes, so that no word of it matches as written.
DISGUISES = {
    "zero-width-space": lambda p: between_letters(p, "\u200b"),
    "invisible-separator": lambda p: between_letters(p, "\u2063\u2064"),
    "variation-selector": lambda p: between_letters(p, "\ufe0f"),
    "tag-character": lambda p: between_letters(p, "\U000e0001"),
    "soft-hyphen-and-bidi-marks": lambda p: between_letters(p, "\u00ad\u200e\u061c"),
    "hangul-filler-spaces": lambda p: p.replace(" ", "\u3164"),
    "braille-blank-spaces": lambda p: p.replace(" ", "\u2800"),
    "halfwidth-filler-spaces": lambda p: p.replace(" ", "\uffa0"),
    "written-in-tags": in_tags,
}


def everything_bob_can_read_as_read(api_client_for, bob, project) -> str:
    """`everything_bob_can_read`, with its characters as they are and read as a reader does."""
    client = api_client_for(bob)
    memories = client.get(f"/projects/{project.pk}/memories?page_size=100").json()["results"]
    logs = list(AutoMemoryLog.objects.values("detail", "reason"))
    audit = list(AuditEvent.objects.values("action", "data"))
    raw = json.dumps([memories, logs, audit], default=str, ensure_ascii=False)
    return text_as_read(raw).casefold()


@pytest.mark.parametrize("disguise", DISGUISES, ids=list(DISGUISES))
def test_invisible_characters_in_an_echo_do_not_carry_a_private_memory_to_the_project(
    disguise, project, alice, bob, private, on, task_factory, api_client_for
):
    task = task_factory(project, alice, prompt="Fix the login bug", completed=True)
    finish(task, f"Result for: {DISGUISES[disguise](injected_prompt(task))}\n\n{WORK}")
    assert "zanzibar pager" not in task.result_text.casefold(), "the echo is disguised"
    assert "zanzibar pager" in text_as_read(task.result_text).casefold(), "yet reads the same"

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 1, AutoMemoryLog.objects.get(task=task).detail
    written = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    assert "session check" in written.content.casefold()
    assert_nothing_private(text_as_read(written.content).casefold())
    assert_nothing_private(everything_bob_can_read_as_read(api_client_for, bob, project))


@pytest.mark.parametrize("style", QUOTING_STYLES, ids=list(QUOTING_STYLES))
def test_no_quoting_style_carries_a_private_memory_to_the_project(
    style, project, alice, bob, private, on, task_factory, api_client_for
):
    memory(project=project, content=PROJECT_NOTE)
    task = task_factory(project, alice, prompt="Fix the login bug", completed=True)
    finish(task, QUOTING_STYLES[style](injected_prompt(task)))
    assert "zanzibar" in task.result_text.casefold(), "the agent did echo the memory"

    summary = process_auto_memories(user=alice)

    assert summary.extracted == 1, AutoMemoryLog.objects.get(task=task).detail
    written = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    assert "session check" in written.content.casefold()
    assert "deploys with make release" not in written.content, "injected memories are dropped"
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))
    assert Task.objects.get(pk=task.pk).result_text == task.result_text, "the task is untouched"


def test_nested_blocks_from_an_older_memory_are_removed_whole(
    project, alice, bob, private, on, task_factory, api_client_for
):
    # An auto memory written before blocks were removed holds a whole earlier block.
    older = IdentityMemory(scope="project", project=project, content="Deploy on Fridays only")
    legacy_block = render_memory_block([], [older])
    memory(project=project, content=f"Deploy notes\n{legacy_block}\n\nRelease checklist")
    task = task_factory(project, alice, prompt="Fix the login bug", completed=True)
    prompt = injected_prompt(task)
    assert prompt.count("=== begin memories") == 1, "blocks never nest"
    finish(task, f"Result for: {prompt}\n{WORK}")

    process_auto_memories(user=alice)

    written = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    assert "Fridays" not in written.content and "checklist" not in written.content
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))


def test_a_memory_deleted_after_injection_is_still_removed(
    project, alice, bob, private, on, task_factory, api_client_for
):
    task = task_factory(project, alice, prompt="Fix the login bug", completed=True)
    prompt = injected_prompt(task)
    IdentityMemory.objects.filter(user=alice).delete()
    finish(task, f"Result for: {prompt}\n{WORK}")

    assert process_auto_memories(user=alice).extracted == 1
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))


def test_a_memory_edited_after_injection_is_removed_as_it_was_injected(
    project, alice, bob, private, on, task_factory, api_client_for
):
    task = task_factory(project, alice, prompt="Fix the login bug", completed=True)
    prompt = injected_prompt(task)
    IdentityMemory.objects.filter(user=alice).update(content="Alice moved to a new team")
    finish(task, f"Result for: {prompt}\n{WORK}")

    assert process_auto_memories(user=alice).extracted == 1
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))


def test_the_injection_audit_event_holds_no_memory_text(project, alice, private, on, task_factory):
    task = task_factory(project, alice)
    injected_prompt(task)
    event = AuditEvent.objects.get(action="worker_memory_injected")
    assert len(event.data["fingerprints"]) == 3
    assert_nothing_private(json.dumps(event.data).casefold())
    assert "alice" not in json.dumps(event.data["fingerprints"]).casefold()


# --- The write-time invariant -------------------------------------------------------------------


def skipped_private(task) -> AutoMemoryLog:
    log = AutoMemoryLog.objects.get(task=task)
    assert (log.outcome, log.reason) == ("skipped", "private_content"), log.detail
    assert not IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task=task).exists()
    return log


@pytest.mark.parametrize(
    "result",
    [
        f"As you asked, {PAGER}. {WORK}",
        f"{WORK} Remember: the zanzibar pager rotation notes in the blue notebook.",
        f"{WORK}\n> {SHORT}",
        f"{WORK} " + HEALTH.replace(" ", "\n   "),
        f"As you asked, {between_letters(PAGER, chr(0x200B))}. {WORK}",
        f"{WORK}\n> {between_letters(SHORT, chr(0xFE0F))}",
        f"{WORK} " + HEALTH.replace(" ", "\u3164"),
        f"{WORK} " + HEALTH.replace(" ", "\u2800"),
        f"{WORK} {in_tags(PAGER)}",
    ],
    ids=[
        "whole",
        "five-word-part",
        "short-memory-whole",
        "re-flowed",
        "zero-width-between-letters",
        "variation-selectors-between-letters",
        "hangul-filler-spaces",
        "braille-blank-spaces",
        "tag-characters",
    ],
)
def test_a_memory_that_would_hold_a_private_memory_is_not_written(
    result, project, alice, bob, private, auto_memory_on, task_factory, api_client_for
):
    # Nothing injected (use_memories off), but the agent knew the text anyway.
    auto_memory_on(alice, use_memories=False, **OPEN_GATES)
    task = task_factory(project, alice, completed=True, result_text=result)

    summary = process_auto_memories(user=alice)

    assert summary.skipped["private_content"] == 1
    log = skipped_private(task)
    assert "user-level memory" in log.detail
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))


def test_another_members_private_memory_arriving_by_message_is_caught(
    project, alice, bob, on, task_factory, auto_memory_on, api_client_for, vera
):
    memory(user=bob, content=HEALTH.replace("Alice", "Bob"))
    auto_memory_on(alice, disable_on_external_context=False, **OPEN_GATES)
    task = task_factory(project, alice, completed=True, result_text=f"{WORK}\nBob said: {HEALTH}")
    TaskFollowup.objects.create(task=task, message=HEALTH, created_by=bob)

    process_auto_memories(user=alice)

    skipped_private(task)
    assert_nothing_private(everything_bob_can_read(api_client_for, vera, project))


def test_private_memories_in_any_status_are_checked(project, alice, task_factory, auto_memory_on):
    memory(user=alice, content=PAGER, status="superseded")
    auto_memory_on(alice, **OPEN_GATES)
    task = task_factory(project, alice, completed=True, result_text=f"{WORK} {PAGER}")
    process_auto_memories(user=alice)
    skipped_private(task)


def test_a_private_content_skip_is_stable_until_something_changes(
    project, alice, private, task_factory, auto_memory_on
):
    auto_memory_on(alice, **OPEN_GATES)
    task = task_factory(project, alice, completed=True, result_text=f"{WORK} {PAGER}")
    process_auto_memories()
    skipped_private(task)
    assert process_auto_memories().scanned == 0


def test_an_unrelated_users_memory_does_not_block_the_project(
    project, alice, charlie, task_factory, auto_memory_on
):
    memory(user=charlie, content=PAGER)
    auto_memory_on(alice, **OPEN_GATES)
    task_factory(project, alice, completed=True, result_text=f"{WORK} {PAGER}")
    assert process_auto_memories(user=alice).extracted == 1


def test_ordinary_words_shared_with_a_private_memory_do_not_block(
    project, alice, private, task_factory, auto_memory_on
):
    auto_memory_on(alice, **OPEN_GATES)
    result = f"{WORK} Alice keeps the release notes in the wiki, under the blue heading."
    task_factory(project, alice, completed=True, result_text=result)
    assert process_auto_memories(user=alice).extracted == 1


def test_the_error_detail_of_a_failed_extraction_holds_no_private_text(
    project, alice, private, on, task_factory, settings
):
    settings.AUTOMEMORY_CONTENT_STRATEGY = "tests.automemory.test_provenance.exploding_strategy"
    task = task_factory(project, alice, completed=True, result_text=f"{WORK} {PAGER}")
    process_auto_memories(user=alice)
    log = AutoMemoryLog.objects.get(task=task)
    assert log.outcome == "error"
    assert "ValueError" in log.detail
    assert_nothing_private(log.detail.casefold())


def exploding_strategy(task, *, injected) -> str:
    raise ValueError(f"cannot summarise {task.result_text}")


# --- The removal itself -------------------------------------------------------------------------


def test_removal_keeps_the_agents_own_words(alice):
    fingerprint = memory_fingerprint(memory(user=alice, content=PAGER))
    text = f"Result for: {PAGER}\n\n{WORK}\nThe pager is fine."
    assert injected_text_removed(text, fingerprints=[fingerprint]) == (
        f"Result for:\n\n{WORK}\nThe pager is fine."
    )


def test_a_fenced_block_goes_even_when_its_memories_are_unknown():
    nonce = "0123456789abcdef"
    text = f"Result for:\n> {fence_begin(nonce)}\n> - some note\n> {fence_end(nonce)}\n\n{WORK}"
    assert injected_text_removed(text, fingerprints=[]) == f"Result for:\n\n{WORK}"


def test_text_without_injected_memories_is_unchanged(alice):
    fingerprint = memory_fingerprint(memory(user=alice, content=PAGER))
    text = "Line one.\n\n\n  Indented line ## with marks ==="
    assert injected_text_removed(text, fingerprints=[fingerprint]) == text


def test_a_task_whose_injected_memories_are_gone_unrecorded_is_not_extracted(
    project, alice, bob, on, task_factory, api_client_for
):
    # Injected before fingerprints were recorded, and deleted since: its text is unknown.
    gone = memory(user=alice, content=PAGER)
    task = task_factory(project, alice, completed=True, result_text=f"Result for: {PAGER}\n{WORK}")
    Task.objects.filter(pk=task.pk).update(injected_memory_ids=[gone.pk])
    gone.delete()

    process_auto_memories(user=alice)

    assert "gone" in skipped_private(task).detail
    assert_nothing_private(everything_bob_can_read(api_client_for, bob, project))


def test_a_task_whose_injected_memories_cannot_be_checked_costs_no_model_call(
    project, alice, auto_memory_on, task_factory, fake_openai
):
    auto_memory_on(
        alice, extract_model="gpt-5-mini", consolidation_model="gpt-5-mini", **OPEN_GATES
    )
    gone = memory(user=alice, content=PAGER)
    task = task_factory(project, alice, completed=True, result_text=f"Result for: {PAGER}\n{WORK}")
    Task.objects.filter(pk=task.pk).update(injected_memory_ids=[gone.pk])
    gone.delete()

    summary = process_auto_memories(user=alice)

    assert "gone" in skipped_private(task).detail
    assert summary.model_calls == 0
    assert fake_openai.completion_requests == []


def test_many_echoes_on_one_long_line_are_each_removed(alice):
    fingerprint = memory_fingerprint(memory(user=alice, content=PAGER))
    text = f"{PAGER} -- ok; " * 5000

    cleaned = injected_text_removed(text, fingerprints=[fingerprint])

    assert cleaned.split() == ["ok;"] * 5000
