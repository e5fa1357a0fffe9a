"""Every extraction log reason has an accurate explanation, shown where the reason is."""

from django.urls import reverse

from automemory.console.explanations import (
    OUTCOME_EXPLANATIONS,
    REASON_EXPLANATIONS,
    reason_explanation,
)
from automemory.models import AutoMemoryLog, AutoMemorySettings, Outcome, Reason
from automemory.services.extraction.sweep import process_auto_memories


def test_every_reason_and_outcome_has_an_explanation():
    missing = [reason for reason in Reason if not REASON_EXPLANATIONS.get(reason, "").strip()]
    assert missing == []
    assert [o for o in Outcome if not OUTCOME_EXPLANATIONS.get(o, "").strip()] == []
    assert set(REASON_EXPLANATIONS) == set(Reason.values)


def test_explanations_are_distinct():
    texts = list(REASON_EXPLANATIONS.values())
    assert len(set(texts)) == len(texts)


def test_superseded_covers_the_same_goal_rule_and_consolidation():
    text = reason_explanation(Reason.SUPERSEDED)
    assert "same goal" in text
    assert "consolidation" in text


def test_no_durable_signal_covers_the_model_and_the_deterministic_text():
    text = reason_explanation(Reason.NO_DURABLE_SIGNAL)
    assert "model" in text
    assert "repeats the goal" in text


def test_model_reasons_say_what_happens_next():
    assert "retried" in reason_explanation(Reason.MODEL_UNAVAILABLE)
    assert "fallback" in reason_explanation(Reason.MODEL_UNAVAILABLE)
    assert "next month" in reason_explanation(Reason.MEMORY_BUDGET_EXHAUSTED)
    assert "retried" in reason_explanation(Reason.MODEL_OUTPUT_INVALID)
    assert "consolidation" in reason_explanation(Reason.MERGED)
    assert "consolidation" in reason_explanation(Reason.ALREADY_KNOWN)
    assert "finished later" in reason_explanation(Reason.SUPERSEDED_ON_WRITE)


def test_a_result_that_only_repeats_the_goal_is_explained_on_the_task_page(
    client, project, task_factory, alice
):
    AutoMemorySettings.objects.create(user=alice, generate_memories=True, min_result_chars=0)
    goal = "Add a CI badge to the README"
    task = task_factory(project, alice, completed=True, prompt=goal, result_text=goal)

    process_auto_memories(user=alice, force=True)

    log = AutoMemoryLog.objects.get(task=task)
    assert (log.outcome, log.reason) == (Outcome.SKIPPED, Reason.NO_DURABLE_SIGNAL)
    client.force_login(alice)
    body = client.get(reverse("console:task", args=[task.pk])).content.decode()
    assert reason_explanation(Reason.NO_DURABLE_SIGNAL) in body
