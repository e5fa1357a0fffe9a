"""Redact first, cut after: a text cut short for storage or display never keeps the first
characters of a secret its cut split (the attack's form: spaces, then a Stripe live key
placed so that a cut before redaction kept `sk_live_` and 15 characters, which no rule
takes for a key)."""

import random
import string
from datetime import timedelta

import pytest

from automemory.models import AutoMemoryLog
from automemory.services.extraction.consolidation import decision_parse
from automemory.services.extraction.deterministic import memory_content
from automemory.services.extraction.drafting import answer_draft
from automemory.services.extraction.model import task_document
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.redactor import (
    REDACTED,
    marker_safe_end,
    redact,
    redacted_slice,
)
from automemory.services.text import cut, keywords_clean, memory_text_clean
from controlplane.models import TaskEvent

KEY = "sk_live_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"  # 36 characters, as the attack's
PREFIX = KEY[:8]  # any kept prefix of 8 or more characters holds this


def spaced(cut_at: int, kept: int = 23) -> str:
    """Spaces, then the key, so that a cut at `cut_at` keeps its first `kept` characters."""
    return " " * (cut_at - kept) + KEY + " and the rest of the text."


def no_key(text) -> bool:
    return PREFIX not in str(text)


def test_the_attack_form_is_a_key_the_redactor_catches_and_its_cut_one_is_not():
    assert redact(KEY) == REDACTED
    assert redact(spaced(2000)[:2000]).strip() == KEY[:23]  # what cutting first kept


@pytest.mark.parametrize("padding_cut", [2000, 1200])
def test_it_leaves_a_key_out_of_a_skip_detail_quoting_a_web_search(
    project, alice, task_factory, auto_memory_on, padding_cut
):
    auto_memory_on(alice)
    task = task_factory(project, alice, completed=True, finished_ago=timedelta(hours=2))
    TaskEvent.objects.create(
        task=task,
        turn=task.turn,
        kind="web_search",
        data={"id": "ws_1", "type": "web_search", "query": spaced(padding_cut)},
    )

    process_auto_memories(user=alice, force=True)

    log = AutoMemoryLog.objects.get(task=task)
    assert log.reason == "external_context"
    assert no_key(log.detail), log.detail
    assert log.detail.startswith("web search '")


@pytest.mark.parametrize("padding_cut", [240, 2000])
def test_it_leaves_a_key_out_of_keywords(padding_cut):
    kept = keywords_clean([spaced(padding_cut), "login"])

    assert all(no_key(keyword) for keyword in kept), kept
    assert "login" in kept


@pytest.mark.parametrize("extra", [0, 8192, 2 * 8192])
def test_it_leaves_a_key_out_of_a_memory_text(extra):
    text = spaced(1200 + extra)

    assert no_key(memory_text_clean(text))


def test_it_leaves_a_key_out_of_a_models_answer():
    answer = {
        "worth_remembering": True,
        "kind": "fact",
        "memory": "The deploy script reads its key from the vault, never from the repo.",
        "keywords": [spaced(240)],
        "citations": [],
        "reason": spaced(800),
    }

    draft = answer_draft(answer)

    assert no_key(draft.content) and all(no_key(k) for k in draft.keywords)
    with pytest.raises(Exception) as declined:
        answer_draft({**answer, "worth_remembering": False})
    assert no_key(declined.value)


def test_it_leaves_a_key_out_of_a_consolidation_reason():
    decision = decision_parse({"action": "add", "reason": spaced(2000)}, candidate_ids=[])

    assert no_key(decision.reason)


def test_it_leaves_a_key_out_of_what_the_model_reads(project, alice, task_factory):
    limit = 12000
    head_chars = limit // 3
    many = ("sk_live_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2" + " ") * 320  # shrinks by 26 each
    result = many + spaced(head_chars + 8192 - len(many)) + "x" * limit
    task = task_factory(project, alice, completed=True, result_text=result, goal=spaced(2000))
    TaskEvent.objects.create(task=task, turn=1, kind="web_search", data={"query": spaced(4000)})

    document = task_document(task)

    assert no_key(document["result"]) and no_key(document["goal"])
    assert no_key(document["events"])
    assert no_key(document["prompt"])


def test_it_leaves_a_key_out_of_a_deterministic_memory(project, alice, task_factory):
    window = 800 * 2 + 8192  # what the excerpt read, cut before redaction
    alphabet = string.ascii_letters + string.digits
    draw = random.Random(7).choice
    # Nineteen keys of 500 characters: redaction shrinks them by 9,310.
    long_keys = "".join(
        "sk_live_" + "".join(draw(alphabet) for _ in range(492)) + " " for _ in range(19)
    )
    task = task_factory(
        project,
        alice,
        completed=True,
        prompt="Fix the deploy",
        result_text=long_keys
        + spaced(window - len(long_keys))
        + "The deploy now reads its key from the vault.",
    )

    assert no_key(memory_content(task))


# --- The two helpers --------------------------------------------------------------------


def test_a_slice_leaves_out_a_secret_crossing_its_end_or_its_start():
    text = "before " + KEY + " after"
    crossing_end = text.index(KEY) + 23
    crossing_start = text.index(KEY) + 5

    assert redacted_slice(text, end=crossing_end) == "before "
    assert redacted_slice(text, start=crossing_start) == " after"
    assert redacted_slice(text, start=crossing_start, end=crossing_end) == ""
    assert redacted_slice(text, end=len(text) - 3) == "before [REDACTED] af"


def test_a_slice_of_the_whole_text_is_the_redacted_text():
    text = f"one {KEY} two token=ghp_{'a1B2c3D4e5' * 4}"

    assert redacted_slice(text) == redact(text)
    assert redacted_slice("") == ""


def test_a_slice_reads_only_its_margin_past_the_cut():
    text = "x" * 20 + " " + KEY

    assert redacted_slice(text, end=5, margin=3) == "x" * 5


def test_a_cut_of_redacted_text_never_splits_a_marker():
    text = "ab" + REDACTED + "cd"

    for end in range(len(text) + 1):
        kept = text[: marker_safe_end(text, end)]
        assert kept in ("", "a", "ab", "ab" + REDACTED, "ab" + REDACTED + "c", text)
    assert cut("ab" + REDACTED + "cd" * 10, 8) == "ab…"
