from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemoryLog, SweepState, TaskAutoMemoryFlags
from automemory.services.extraction.deterministic import memory_content
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemoryStatus,
    Quota,
    Task,
    TaskFollowup,
    TaskKind,
    TaskStatus,
)
from controlplane.services.usage import usage_record
from tests.automemory.helpers import auto_memories, log_of
from tests.conftest import memory_stored


def spend(task, cost_usd):
    """A run of `task` that cost `cost_usd`, finished now (recorded in the usage ledger)."""
    usage_record(
        user_id=task.user_id, task_id=task.pk, cost_usd=cost_usd, finished_at=timezone.now()
    )


def test_it_extracts_a_completed_idle_task_into_a_project_memory(task_factory, project, alice, on):
    task = task_factory(
        project, alice, prompt="Add retries to the HTTP client\nmore detail", completed=True
    )
    summary = process_auto_memories(user=alice)
    assert summary.extracted == 1
    memory = auto_memories().get()
    assert memory.scope == MemoryScope.PROJECT
    assert memory.project == project
    assert memory.user is None
    assert memory.source_task_id == task.pk
    assert memory.status == MemoryStatus.ACTIVE
    assert memory.content.startswith("Add retries to the HTTP client\nDone. The fix")
    assert "more detail" not in memory.content
    log = log_of(task)
    assert (log.outcome, log.reason, log.memory_id) == ("extracted", "new", memory.pk)


def test_the_memory_keeps_only_the_first_800_result_characters(task_factory, project, alice, on):
    task_factory(project, alice, completed=True, result_text="a" * 700 + "b" * 300 + "TAIL")
    process_auto_memories(user=alice)
    content = auto_memories().get().content
    assert content.count("a") >= 700
    assert content.endswith("a" * 700 + "b" * 100)
    assert "TAIL" not in content


def test_a_goal_task_is_remembered_by_its_goal(task_factory, project, alice, on):
    task_factory(
        project, alice, prompt="the prompt", goal="  Ship   the\tbilling page  \nx", completed=True
    )
    process_auto_memories(user=alice)
    assert auto_memories().get().content.startswith("Ship the billing page\n")


def test_very_long_goal_lines_are_capped(task_factory, project, alice, on):
    task_factory(project, alice, prompt="word " * 500, completed=True)
    process_auto_memories(user=alice)
    first_line = auto_memories().get().content.splitlines()[0]
    assert len(first_line) <= 200


def test_secrets_are_redacted_from_the_memory_but_not_from_the_task(
    task_factory, project, alice, on
):
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    task = task_factory(
        project,
        alice,
        prompt=f"Deploy with token={secret}",
        completed=True,
        result_text=f"Used password=hunter2hunter2 and {secret}. " * 10,
    )
    process_auto_memories(user=alice)
    content = auto_memories().get().content
    assert secret not in content
    assert "hunter2hunter2" not in content
    assert "[REDACTED]" in content
    task.refresh_from_db()
    assert secret in task.prompt and secret in task.result_text


@pytest.mark.parametrize(
    "status",
    [
        TaskStatus.FAILED,
        TaskStatus.INTERRUPTED,
        TaskStatus.MERGED,
        TaskStatus.RUNNING,
        TaskStatus.QUEUED,
    ],
)
def test_only_completed_tasks_are_candidates(task_factory, project, alice, on, status):
    task = task_factory(project, alice, completed=True)
    task.status = status
    task.save()
    summary = process_auto_memories(user=alice)
    assert summary.scanned == 0
    assert not auto_memories().exists()


# --- The gates, in order ---------------------------------------------------------------------


def test_it_skips_when_generate_is_off(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, generate_memories=False)
    task = task_factory(project, alice, completed=True)
    summary = process_auto_memories(user=alice)
    assert summary.skipped["generate_disabled"] == 1
    assert (log_of(task).outcome, log_of(task).reason) == ("skipped", "generate_disabled")
    assert not auto_memories().exists()


def test_generate_is_off_by_default(task_factory, project, alice):
    task = task_factory(project, alice, completed=True)
    process_auto_memories(user=alice)
    assert log_of(task).reason == "generate_disabled"


def test_a_task_flag_wins_over_the_user_setting(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, generate_memories=False)
    flagged_on = task_factory(project, alice, prompt="goal one", completed=True)
    TaskAutoMemoryFlags.objects.create(task=flagged_on, generate_memories=True)
    auto_memory_on(alice, generate_memories=True)
    flagged_off = task_factory(project, alice, prompt="goal two", completed=True)
    TaskAutoMemoryFlags.objects.create(task=flagged_off, generate_memories=False)
    auto_memory_on(alice, generate_memories=False)

    process_auto_memories(user=alice)
    assert log_of(flagged_on).outcome == "extracted"
    assert log_of(flagged_off).reason == "generate_disabled"


def test_it_waits_until_the_task_is_idle(task_factory, project, alice, on):
    with freeze_time("2026-03-01 12:00:00"):
        task = task_factory(project, alice, completed=True, finished_ago=timedelta(seconds=0))
    with freeze_time("2026-03-01 12:14:59"):
        summary = process_auto_memories(user=alice)
    assert summary.skipped["not_idle"] == 1
    assert log_of(task).reason == "not_idle"
    with freeze_time("2026-03-01 12:15:00"):
        summary = process_auto_memories(user=alice)
    assert summary.extracted == 1
    log = log_of(task)
    assert log.outcome == "extracted"
    assert log.attempts == 2, "a later attempt overwrites the same row"
    assert AutoMemoryLog.objects.count() == 1


def test_idle_is_measured_from_now_argument(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True, finished_ago=timedelta(seconds=10))
    process_auto_memories(user=alice)
    assert log_of(task).reason == "not_idle"
    process_auto_memories(user=alice, now=timezone.now() + timedelta(hours=1))
    assert log_of(task).outcome == "extracted"


@pytest.mark.parametrize("missing", ["started_at", "finished_at"])
def test_it_skips_tasks_without_timestamps(task_factory, project, alice, on, missing):
    task = task_factory(project, alice, completed=True, **{missing: None})
    summary = process_auto_memories(user=alice)
    assert summary.skipped["missing_timestamps"] == 1
    assert log_of(task).reason == "missing_timestamps"


def test_it_skips_short_runs(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True, duration=timedelta(seconds=29))
    process_auto_memories(user=alice)
    assert log_of(task).reason == "duration_too_short"


def test_it_skips_short_results(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True, result_text="x" * 199)
    process_auto_memories(user=alice)
    assert log_of(task).reason == "result_too_short"
    assert "199" in log_of(task).detail


def test_thresholds_come_from_the_user_settings(task_factory, project, alice, auto_memory_on):
    auto_memory_on(alice, min_duration_seconds=5, min_result_chars=10, idle_seconds=0)
    task = task_factory(
        project,
        alice,
        completed=True,
        duration=timedelta(seconds=6),
        result_text="0123456789",
        finished_ago=timedelta(0),
    )
    process_auto_memories(user=alice)
    assert log_of(task).outcome == "extracted"


def test_it_skips_tasks_that_received_messages(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True)
    TaskFollowup.objects.create(task=task, message="also check the logs", created_by=alice)
    summary = process_auto_memories(user=alice)
    assert summary.skipped["external_context"] == 1
    assert log_of(task).reason == "external_context"


def test_it_skips_subtasks_of_a_coordinator(task_factory, project, alice, on):
    parent = task_factory(project, alice, kind=TaskKind.COORDINATOR, prompt="coordinate")
    task = task_factory(project, alice, completed=True, parent_task=parent)
    process_auto_memories(user=alice)
    assert log_of(task).reason == "external_context"


def test_external_context_is_allowed_when_the_setting_is_off(
    task_factory, project, alice, auto_memory_on
):
    auto_memory_on(alice, disable_on_external_context=False)
    task = task_factory(project, alice, completed=True)
    TaskFollowup.objects.create(task=task, message="hi", created_by=alice)
    process_auto_memories(user=alice)
    assert log_of(task).outcome == "extracted"


def test_it_skips_when_the_quota_is_low(task_factory, project, alice, on):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("10"))
    spend(task_factory(project, alice, prompt="spend"), Decimal("8.50"))
    task = task_factory(project, alice, completed=True)
    summary = process_auto_memories(user=alice)
    assert summary.skipped["quota_low"] == 1
    assert log_of(task).reason == "quota_low"
    assert "15" in log_of(task).detail


def test_a_zero_limit_means_no_quota_left(task_factory, project, alice, on):
    Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))
    task = task_factory(project, alice, completed=True)
    process_auto_memories(user=alice)
    assert log_of(task).reason == "quota_low"


def test_an_unlimited_quota_passes(task_factory, project, alice, on):
    Quota.objects.create(user=alice, monthly_limit_usd=None)
    spend(task_factory(project, alice, prompt="spend"), Decimal("500"))
    task = task_factory(project, alice, completed=True)
    process_auto_memories(user=alice)
    assert log_of(task).outcome == "extracted"


def test_it_fails_closed_when_the_quota_cannot_be_read(
    task_factory, project, alice, on, monkeypatch
):
    def broken(**kwargs):
        raise RuntimeError("quota service down")

    monkeypatch.setattr("controlplane.services.quota.quota_statuses_get", broken)
    task = task_factory(project, alice, completed=True)
    summary = process_auto_memories(user=alice)
    assert summary.skipped["quota_check_failed"] == 1
    assert log_of(task).reason == "quota_check_failed"
    assert not auto_memories().exists()


def test_the_first_failing_gate_is_the_one_logged(task_factory, project, alice, on):
    task = task_factory(
        project, alice, completed=True, finished_ago=timedelta(seconds=1), result_text="short"
    )
    TaskFollowup.objects.create(task=task, message="hi", created_by=alice)
    process_auto_memories(user=alice)
    assert log_of(task).reason == "not_idle"


# --- Force -----------------------------------------------------------------------------------


def test_force_skips_the_idle_duration_and_length_gates(task_factory, project, alice, on):
    task = task_factory(
        project,
        alice,
        completed=True,
        finished_ago=timedelta(0),
        duration=timedelta(seconds=1),
        result_text="tiny",
    )
    process_auto_memories(user=alice)
    assert log_of(task).reason == "not_idle"
    summary = process_auto_memories(user=alice, force=True)
    assert summary.extracted == 1
    assert log_of(task).forced is True


def test_force_never_skips_the_switch_context_or_quota_gates(
    task_factory, project, alice, bob, project_factory, auto_memory_on
):
    auto_memory_on(alice, generate_memories=False)
    off = task_factory(project, alice, completed=True, prompt="off")
    auto_memory_on(bob)
    messaged = task_factory(project, bob, completed=True, prompt="messaged")
    TaskFollowup.objects.create(task=messaged, message="hi", created_by=bob)
    Quota.objects.create(user=bob, monthly_limit_usd=Decimal("0"))
    broke = task_factory(project, bob, completed=True, prompt="broke")

    process_auto_memories(user=alice, force=True)
    process_auto_memories(user=bob, force=True)
    assert log_of(off).reason == "generate_disabled"
    assert log_of(messaged).reason == "external_context"
    assert log_of(broke).reason == "quota_low"
    assert not auto_memories().exists()


# --- Once per task; consolidation ------------------------------------------------------------


def test_a_task_is_extracted_once(task_factory, project, alice, on):
    task_factory(project, alice, completed=True)
    assert process_auto_memories(user=alice).extracted == 1
    second = process_auto_memories(user=alice, force=True)
    assert second.extracted == 0
    assert second.scanned == 0
    assert auto_memories().count() == 1


def test_a_forgotten_memory_does_not_come_back(task_factory, project, alice, on):
    task_factory(project, alice, completed=True)
    process_auto_memories(user=alice)
    auto_memories().get().delete()
    process_auto_memories(user=alice, force=True)
    process_auto_memories()
    assert not auto_memories().exists()


def auto_memory_row(task, goal_key, **fields):
    values = {
        "scope": "project",
        "project": task.project,
        "content": "x",
        "source": "auto",
        "source_task": task,
        "goal_key": goal_key,
        **fields,
    }
    return memory_stored(**values)


def test_the_database_refuses_a_second_auto_memory_for_one_task(task_factory, project, alice):
    task = task_factory(project, alice, completed=True)
    auto_memory_row(task, "k1")
    with pytest.raises(IntegrityError), transaction.atomic():
        auto_memory_row(task, "k2")


def test_the_database_refuses_a_user_level_auto_memory(task_factory, project, alice):
    task = task_factory(project, alice, completed=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        auto_memory_row(task, "k", scope="user", user=alice, project=None)


def test_the_database_refuses_two_active_auto_memories_per_goal(task_factory, project, alice):
    one = task_factory(project, alice, completed=True)
    two = task_factory(project, alice, completed=True)
    auto_memory_row(one, "same")
    with pytest.raises(IntegrityError), transaction.atomic():
        auto_memory_row(two, "same")
    auto_memory_row(two, "same", status="superseded")


@pytest.mark.parametrize("later_first", [True, False])
def test_the_later_finished_task_keeps_the_active_memory_whatever_the_order(
    task_factory, project, alice, on, later_first
):
    early = task_factory(
        project,
        alice,
        prompt="Fix the flaky test",
        completed=True,
        finished_ago=timedelta(hours=3),
        result_text="early " * 50,
    )
    late = task_factory(
        project,
        alice,
        prompt="  fix THE   flaky test ",
        completed=True,
        finished_ago=timedelta(hours=2),
        result_text="late " * 50,
    )
    second = early if later_first else late
    TaskAutoMemoryFlags.objects.create(task=second, generate_memories=False)
    process_auto_memories(user=alice)
    TaskAutoMemoryFlags.objects.filter(task=second).update(generate_memories=True)
    summary = process_auto_memories(user=alice, force=True)

    assert summary.superseded == 1
    active = auto_memories().get(status=MemoryStatus.ACTIVE)
    old = auto_memories().get(status=MemoryStatus.SUPERSEDED)
    assert active.source_task_id == late.pk
    assert old.source_task_id == early.pk
    assert old.superseded_by_id == active.pk
    assert log_of(late).reason == ("new" if later_first else "superseded")


def test_one_sweep_settles_a_goal_met_twice(task_factory, project, alice, on):
    for hours in (5, 4, 3):
        task_factory(
            project,
            alice,
            prompt="Upgrade Django",
            completed=True,
            finished_ago=timedelta(hours=hours),
        )
    summary = process_auto_memories(user=alice)
    assert summary.extracted == 3
    assert auto_memories(status=MemoryStatus.ACTIVE).count() == 1
    assert auto_memories(status=MemoryStatus.SUPERSEDED).count() == 2


def test_the_same_goal_in_two_projects_keeps_both(task_factory, project_factory, alice, on):
    one, two = project_factory(alice), project_factory(alice)
    task_factory(one, alice, prompt="Upgrade Django", completed=True)
    task_factory(two, alice, prompt="Upgrade Django", completed=True)
    process_auto_memories(user=alice)
    assert auto_memories(status=MemoryStatus.ACTIVE).count() == 2


def test_manual_memories_are_never_superseded(task_factory, project, alice, on):
    manual = IdentityMemory.objects.create(
        scope="project", project=project, content="Upgrade Django", created_by=alice
    )
    task_factory(project, alice, prompt="Upgrade Django", completed=True)
    process_auto_memories(user=alice)
    manual.refresh_from_db()
    assert manual.status == MemoryStatus.ACTIVE


def test_auto_extraction_never_writes_user_memories(task_factory, project, alice, on):
    for i in range(3):
        task_factory(project, alice, prompt=f"goal {i}", completed=True)
    process_auto_memories()
    assert not IdentityMemory.objects.filter(scope=MemoryScope.USER).exists()


# --- The global sweep --------------------------------------------------------------------------


def test_the_global_sweep_covers_every_user(task_factory, project, alice, bob, auto_memory_on):
    auto_memory_on(alice)
    auto_memory_on(bob)
    task_factory(project, alice, prompt="a", completed=True)
    task_factory(project, bob, prompt="b", completed=True)
    assert process_auto_memories().extracted == 2


def test_the_global_sweep_sees_tasks_completed_after_its_previous_round(
    task_factory, project, alice, on
):
    task_factory(project, alice, prompt="first", completed=True)
    assert process_auto_memories().extracted == 1
    task_factory(project, alice, prompt="second", completed=True)
    assert process_auto_memories().extracted == 1
    with freeze_time(timezone.now() + timedelta(minutes=5)):
        assert process_auto_memories().scanned == 0


def test_the_global_sweep_retries_not_idle_tasks_later(task_factory, project, alice, on):
    task = task_factory(project, alice, completed=True, finished_ago=timedelta(seconds=5))
    with freeze_time(timezone.now() + timedelta(minutes=2)):
        process_auto_memories()
    assert log_of(task).reason == "not_idle"
    with freeze_time(timezone.now() + timedelta(minutes=20)):
        process_auto_memories()
    assert log_of(task).outcome == "extracted"


def test_stable_skips_are_not_reexamined_until_something_changes(
    task_factory, project, alice, on, api_client_for
):
    task = task_factory(project, alice, completed=True, result_text="short")
    process_auto_memories()
    assert log_of(task).reason == "result_too_short"
    with freeze_time(timezone.now() + timedelta(minutes=5)):
        assert process_auto_memories().scanned == 0
        assert process_auto_memories(user=alice).scanned == 0
        response = api_client_for(alice).patch(
            "/users/me/auto-memory-settings", {"min_result_chars": 3}, format="json"
        )
        assert response.status_code == 200
        assert process_auto_memories().extracted == 1


def test_switching_generate_on_later_picks_up_skipped_tasks(
    task_factory, project, alice, api_client_for
):
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    assert log_of(task).reason == "generate_disabled"
    api_client_for(alice).put(
        "/users/me/auto-memory-settings", {"generate_memories": True}, format="json"
    )
    process_auto_memories()
    assert log_of(task).outcome == "extracted"


def test_a_task_flag_set_later_picks_up_the_task(task_factory, project, alice, api_client_for):
    task = task_factory(project, alice, completed=True)
    process_auto_memories()
    response = api_client_for(alice).post(
        f"/tasks/{task.pk}/auto-memory-flags", {"generate_memories": True}, format="json"
    )
    assert response.status_code == 200
    process_auto_memories()
    assert log_of(task).outcome == "extracted"


def test_a_user_sweep_touches_only_that_users_tasks(
    task_factory, project, alice, bob, auto_memory_on
):
    auto_memory_on(alice)
    auto_memory_on(bob)
    task_factory(project, bob, completed=True)
    assert process_auto_memories(user=alice).scanned == 0
    assert not AutoMemoryLog.objects.exists()


def flaky_strategy(task, *, injected):
    """A content strategy that fails on the task whose prompt is "bad"."""
    if task.prompt == "bad":
        raise ValueError("cannot render password=hunter22")
    return memory_content(task, injected=injected)


def broken_strategy(task, *, injected):
    raise ValueError("renderer broke")


def test_errors_are_logged_and_the_sweep_goes_on(task_factory, project, alice, on, settings):
    bad = task_factory(project, alice, prompt="bad", completed=True)
    good = task_factory(project, alice, prompt="good", completed=True)
    settings.AUTOMEMORY_CONTENT_STRATEGY = f"{__name__}.flaky_strategy"
    summary = process_auto_memories(user=alice)
    assert summary.errors == 1
    assert summary.extracted == 1
    assert log_of(bad).outcome == "error"
    assert "hunter22" not in log_of(bad).detail
    assert log_of(good).outcome == "extracted"


def test_sweep_queries_do_not_grow_with_candidates(task_factory, project, alice, on):
    def queries_for(count):
        AutoMemoryLog.objects.all().delete()
        for _ in range(count):
            task_factory(project, alice, completed=True, result_text="short")
        with CaptureQueriesContext(connection) as ctx:
            summary = process_auto_memories(user=alice)
        return len(ctx.captured_queries), summary.scanned

    small, scanned_small = queries_for(3)
    large, scanned_large = queries_for(40)
    assert scanned_large == 43 and scanned_small == 3
    assert large == small


def test_an_echoed_memory_block_is_not_remembered_again(task_factory, project, alice, on):
    from automemory.services.memory_block import render_memory_block

    old = IdentityMemory.objects.create(scope="project", project=project, content="OLD FACT")
    echoed = render_memory_block([], [old]) + "\n\nShip it\n" + "Shipped the release. " * 20
    task_factory(project, alice, prompt="Ship it", completed=True, result_text=echoed)
    process_auto_memories(user=alice)
    content = auto_memories().get().content
    assert "OLD FACT" not in content
    assert content.startswith("Ship it\nShipped the release.")


def test_the_global_sweep_leaves_a_not_idle_task_alone_until_it_is_idle(
    task_factory, project, alice, on
):
    task = task_factory(project, alice, completed=True, finished_ago=timedelta(seconds=0))
    start = timezone.now()
    process_auto_memories(now=start)
    assert log_of(task).reason == "not_idle"
    assert log_of(task).retry_after == task.finished_at + timedelta(seconds=900)
    assert process_auto_memories(now=start + timedelta(minutes=5)).scanned == 0
    assert log_of(task).attempts == 1
    assert process_auto_memories(now=start + timedelta(minutes=15, seconds=1)).extracted == 1


def test_a_low_quota_is_looked_at_again_later(task_factory, project, alice, on, settings):
    settings.AUTOMEMORY_QUOTA_LOW_RETRY_SECONDS = 60
    quota = Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))
    task = task_factory(project, alice, completed=True)
    start = timezone.now()
    process_auto_memories(now=start)
    assert log_of(task).reason == "quota_low"
    quota.monthly_limit_usd = None
    quota.save()
    assert process_auto_memories(now=start + timedelta(seconds=30)).scanned == 0
    assert process_auto_memories(now=start + timedelta(seconds=61)).extracted == 1


def test_errors_back_off_and_stop_after_five_attempts(task_factory, project, alice, on, settings):
    settings.AUTOMEMORY_CONTENT_STRATEGY = f"{__name__}.broken_strategy"
    task = task_factory(project, alice, completed=True)
    now = timezone.now()
    process_auto_memories(now=now)
    assert process_auto_memories(now=now + timedelta(seconds=30)).scanned == 0
    for _ in range(10):
        now += timedelta(hours=2)
        process_auto_memories(now=now)
    assert log_of(task).outcome == "error"
    assert log_of(task).attempts == 5


# --- The per-user sweep's cost -----------------------------------------------------------------


def settled_history(task_factory, project, user, count, *, start):
    """`count` tasks of `user` that earlier rounds already dealt with, the cursor past them."""
    with freeze_time(start):
        for i in range(count):
            short = i % 3 == 0
            task_factory(
                project,
                user,
                prompt=f"history {start:%H%M} {i}",
                completed=True,
                result_text="short" if short else None,
            )
        process_auto_memories()
    with freeze_time(start + timedelta(minutes=5)):
        process_auto_memories()


def test_the_per_user_sweep_reads_a_fixed_number_of_queries_whatever_the_history(
    task_factory, project, alice, on
):
    start = timezone.now()

    def queries_with_history(count, at):
        settled_history(task_factory, project, alice, count, start=at)
        with freeze_time(at + timedelta(minutes=10)):
            with CaptureQueriesContext(connection) as idle:
                assert process_auto_memories(user=alice).scanned == 0
            task_factory(project, alice, prompt=f"pending {count}", completed=True)
            with CaptureQueriesContext(connection) as pending:
                assert process_auto_memories(user=alice).extracted == 1
        return len(idle.captured_queries), len(pending.captured_queries)

    small = queries_with_history(3, start)
    large = queries_with_history(40, start + timedelta(hours=1))
    assert AutoMemoryLog.objects.filter(user=alice).count() == 45
    assert large == small


def test_the_per_user_sweep_sees_a_skipped_task_completed_again(task_factory, project, alice, on):
    start = timezone.now()
    with freeze_time(start):
        task = task_factory(project, alice, completed=True, result_text="short")
        process_auto_memories()
    with freeze_time(start + timedelta(minutes=5)):
        process_auto_memories()
        assert process_auto_memories(user=alice).scanned == 0
        task.result_text = "A longer answer. " * 20
        task.save()
        assert process_auto_memories(user=alice).extracted == 1


def test_a_forced_user_sweep_reexamines_skips_the_cursor_has_passed(
    task_factory, project, alice, on
):
    start = timezone.now()
    with freeze_time(start):
        short = task_factory(project, alice, prompt="short", completed=True, result_text="tiny")
        quick = task_factory(
            project, alice, prompt="quick", completed=True, duration=timedelta(seconds=2)
        )
        process_auto_memories()
    with freeze_time(start + timedelta(minutes=5)):
        process_auto_memories()
        assert process_auto_memories(user=alice).scanned == 0
        summary = process_auto_memories(user=alice, force=True)
    assert summary.extracted == 2
    assert log_of(short).forced and log_of(quick).forced


def test_a_per_user_sweep_keeps_its_own_cursor(task_factory, project, alice, bob, on):
    start = timezone.now()
    with freeze_time(start):
        task_factory(project, alice, completed=True, result_text="short")
        process_auto_memories(user=alice)
    with freeze_time(start + timedelta(minutes=5)):
        assert process_auto_memories(user=alice).scanned == 0
    state = SweepState.objects.get(name=f"user:{alice.pk}")
    # Past everything read, the skipped task included, but never closer than 30 s to the read.
    assert state.cursor_updated_at == start + timedelta(minutes=5) - timedelta(seconds=30)
    assert state.last_sweep_at == start + timedelta(minutes=5)
    # The global sweep's cursor is the global sweep's own.
    assert not SweepState.objects.filter(name="global", last_sweep_at__isnull=False).exists()
    assert not SweepState.objects.filter(name=f"user:{bob.pk}").exists()


def test_the_per_user_sweep_still_reports_waiting_tasks_each_time(task_factory, project, alice, on):
    start = timezone.now()
    with freeze_time(start):
        task = task_factory(project, alice, completed=True, finished_ago=timedelta(0))
        process_auto_memories()
    with freeze_time(start + timedelta(minutes=5)):
        process_auto_memories()
        summary = process_auto_memories(user=alice)
    assert summary.skipped["not_idle"] == 1
    assert log_of(task).attempts == 2


def test_the_global_cursor_keeps_up_with_the_clock_when_nothing_is_returned(
    task_factory, project, alice, on
):
    start = timezone.now()
    with freeze_time(start):
        task_factory(project, alice, completed=True)
        assert process_auto_memories().extracted == 1
    with freeze_time(start + timedelta(minutes=5)):
        assert process_auto_memories().scanned == 0
    state = SweepState.objects.get(name="global")
    assert state.cursor_updated_at == start + timedelta(minutes=5) - timedelta(seconds=30)


def test_a_task_committed_late_within_the_margin_is_still_seen(task_factory, project, alice, on):
    start = timezone.now()
    with freeze_time(start):
        process_auto_memories()
        late = task_factory(project, alice, completed=True)
    # Its transaction stamped `updated_at` 20 s before the sweep but committed after it.
    Task.objects.filter(pk=late.pk).update(updated_at=start - timedelta(seconds=20))
    with freeze_time(start + timedelta(seconds=1)):
        assert process_auto_memories().extracted == 1
