"""The monthly quota: the computation's edge cases and the endpoints."""

from datetime import UTC, datetime
from decimal import Decimal, localcontext

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from automemory.models import AutoMemoryLog
from automemory.services.extraction.sweep import process_auto_memories
from controlplane.models import AuditEvent, Quota, Task
from controlplane.services.quota import quota_status_get, quota_statuses_get
from controlplane.services.usage import usage_record

from .helpers import post_json

pytestmark = pytest.mark.django_db


def spend(task_factory, project, user, amount: str, *, when: datetime | None = None):
    """A completed task whose one run cost `amount` and finished `when` (default: now)."""
    task = task_factory(project, user, completed=True)
    usage_record(
        user_id=user.pk,
        task_id=task.pk,
        project_id=project.pk,
        turn=1,
        cost_usd=Decimal(amount),
        finished_at=when or timezone.now(),
    )
    return task


class TestComputation:
    def test_no_row_means_the_default_ten_dollars(self, alice):
        status = quota_status_get(user_id=alice.pk)

        assert status.monthly_limit_usd == Decimal("10")
        assert status.spent_usd == 0
        assert status.remaining_percent == 100

    def test_the_default_is_configurable(self, alice, settings, project, task_factory):
        settings.CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD = Decimal("4")
        spend(task_factory, project, alice, "1")

        assert quota_status_get(user_id=alice.pk).remaining_percent == Decimal("75.00")

    def test_a_null_limit_is_unlimited(self, alice, project, task_factory):
        Quota.objects.create(user=alice, monthly_limit_usd=None)
        spend(task_factory, project, alice, "5000")

        status = quota_status_get(user_id=alice.pk)
        assert status.monthly_limit_usd is None
        assert status.remaining_percent == 100
        assert not status.exhausted

    def test_a_zero_limit_leaves_zero_percent(self, alice):
        Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))

        status = quota_status_get(user_id=alice.pk)
        assert status.remaining_percent == 0
        assert status.exhausted

    def test_overspending_floors_at_zero(self, alice, project, task_factory):
        spend(task_factory, project, alice, "12.5")

        assert quota_status_get(user_id=alice.pk).remaining_percent == 0

    def test_only_the_users_own_spend_counts(self, alice, bob, project, task_factory):
        spend(task_factory, project, bob, "9")
        spend(task_factory, project, alice, "2.5")

        status = quota_status_get(user_id=alice.pk)
        assert status.spent_usd == Decimal("2.5")
        assert status.remaining_percent == Decimal("75.00")

    def test_spend_of_last_month_does_not_count(self, alice, project, task_factory):
        with freeze_time("2026-03-31 23:59:59", tz_offset=0):
            spend(task_factory, project, alice, "6")
        with freeze_time("2026-04-01 00:00:00", tz_offset=0):
            spend(task_factory, project, alice, "1")
            status = quota_status_get(user_id=alice.pk)

        assert status.spent_usd == Decimal("1")
        assert status.remaining_percent == Decimal("90.00")

    def test_the_month_is_the_utc_calendar_month(self, alice, project, task_factory):
        spend(task_factory, project, alice, "3", when=datetime(2026, 12, 31, 23, 30, tzinfo=UTC))
        spend(task_factory, project, alice, "4", when=datetime(2027, 1, 1, 0, 0, tzinfo=UTC))

        december = quota_status_get(user_id=alice.pk, now=datetime(2026, 12, 15, tzinfo=UTC))
        january = quota_status_get(user_id=alice.pk, now=datetime(2027, 1, 31, 23, tzinfo=UTC))

        assert december.spent_usd == Decimal("3")
        assert january.spent_usd == Decimal("4")

    def test_a_task_created_last_month_spends_in_the_month_its_run_finished(
        self, alice, project, task_factory
    ):
        with freeze_time("2026-03-20 12:00:00", tz_offset=0):
            task = task_factory(project, alice)
        spend_run = {"user_id": alice.pk, "task_id": task.pk}
        usage_record(
            **spend_run, cost_usd=Decimal("1"), finished_at=datetime(2026, 3, 20, tzinfo=UTC)
        )
        usage_record(
            **spend_run, cost_usd=Decimal("9"), finished_at=datetime(2026, 4, 2, tzinfo=UTC)
        )

        april = quota_status_get(user_id=alice.pk, now=datetime(2026, 4, 30, tzinfo=UTC))

        assert april.spent_usd == Decimal("9")
        assert april.remaining_percent == Decimal("10")
        assert Task.objects.get(pk=task.pk).cost_usd == Decimal("10")

    def test_a_tasks_own_cost_field_is_not_spend(self, alice, project, task_factory):
        task_factory(project, alice, completed=True, cost_usd=Decimal("9"))

        assert quota_status_get(user_id=alice.pk).spent_usd == 0

    def test_remaining_is_exact_and_never_rounded_up(self, alice, project, task_factory):
        spend(task_factory, project, alice, "8.0005")

        status = quota_status_get(user_id=alice.pk)

        assert status.remaining_percent == Decimal("19.995")
        assert status.remaining_percent < 20

    def test_a_third_left_stays_below_a_third(self, alice, project, task_factory):
        Quota.objects.create(user=alice, monthly_limit_usd=Decimal("3"))
        spend(task_factory, project, alice, "2")

        remaining = quota_status_get(user_id=alice.pk).remaining_percent

        assert remaining > Decimal("33.333333")
        with localcontext(prec=60):
            assert remaining * 3 < 100  # floored, never rounded up to a third

    def test_the_memory_gate_refuses_19_995_percent_against_20(
        self, alice, project, task_factory, auto_memory_on
    ):
        auto_memory_on(alice, min_rate_limit_remaining_percent=20)
        spend(task_factory, project, alice, "8.0005")
        task = task_factory(project, alice, completed=True)

        process_auto_memories(user=alice)

        log = AutoMemoryLog.objects.get(task=task)
        assert log.reason == "quota_low"
        assert log.detail == "19.99% of the monthly quota left, below 20%"

    def test_the_memory_gate_passes_exactly_20_percent(
        self, alice, project, task_factory, auto_memory_on
    ):
        auto_memory_on(alice, min_rate_limit_remaining_percent=20)
        spend(task_factory, project, alice, "8")
        task = task_factory(project, alice, completed=True)

        process_auto_memories(user=alice)

        assert AutoMemoryLog.objects.get(task=task).outcome == "extracted"

    def test_a_zero_limit_with_spend_still_reads_zero(self, alice, project, task_factory):
        Quota.objects.create(user=alice, monthly_limit_usd=Decimal("0"))
        spend(task_factory, project, alice, "1")

        status = quota_status_get(user_id=alice.pk)
        assert (status.remaining_percent, status.spent_usd) == (0, Decimal("1"))

    def test_the_gates_need_no_spend_read_for_unlimited_users(self, alice, project, task_factory):
        Quota.objects.create(user=alice, monthly_limit_usd=None)
        spend(task_factory, project, alice, "5000")

        with CaptureQueriesContext(connection) as queries:
            status = quota_status_get(user_id=alice.pk, always_read_spend=False)

        assert len(queries) == 1
        assert status.spent_usd is None
        assert not status.exhausted

    def test_many_users_take_two_queries_whatever_their_history(
        self, alice, bob, project, task_factory
    ):
        for amount in ("1", "2", "3"):
            spend(task_factory, project, alice, amount)
            spend(task_factory, project, bob, amount)
        Quota.objects.create(user=bob, monthly_limit_usd=Decimal("100"))

        with CaptureQueriesContext(connection) as queries:
            statuses = quota_statuses_get(user_ids=[alice.pk, bob.pk])

        assert len(queries) == 2
        assert statuses[alice.pk].remaining_percent == Decimal("40")
        assert statuses[bob.pk].remaining_percent == Decimal("94")


class TestEndpoints:
    def test_a_user_reads_their_quota(self, api_client_for, alice, project, task_factory):
        spend(task_factory, project, alice, "2.5")

        body = api_client_for(alice).get("/users/me/quota").json()

        assert body == {"monthly_limit_usd": 10.0, "spent_usd": 2.5, "remaining_percent": 75.0}

    def test_the_percent_is_rounded_down_for_display_only(
        self, api_client_for, alice, project, task_factory
    ):
        spend(task_factory, project, alice, "8.0005")

        body = api_client_for(alice).get("/users/me/quota").json()

        assert body == {"monthly_limit_usd": 10.0, "spent_usd": 8.0005, "remaining_percent": 19.99}

    def test_an_unlimited_user_still_sees_their_spend(
        self, api_client_for, alice, project, task_factory
    ):
        Quota.objects.create(user=alice, monthly_limit_usd=None)
        spend(task_factory, project, alice, "42.5")

        body = api_client_for(alice).get("/users/me/quota").json()

        assert body == {"monthly_limit_usd": None, "spent_usd": 42.5, "remaining_percent": 100.0}

    def test_an_unlimited_quota_reads_as_null(self, api_client_for, alice):
        Quota.objects.create(user=alice, monthly_limit_usd=None)

        body = api_client_for(alice).get("/users/me/quota").json()

        assert body["monthly_limit_usd"] is None
        assert body["remaining_percent"] == 100

    def test_staff_set_a_limit(self, api_client_for, staff, alice):
        response = post_json(
            api_client_for(staff), "/users/alice/quota", {"monthly_limit_usd": 25.5}, method="put"
        )

        assert response.status_code == 200
        assert response.json()["monthly_limit_usd"] == 25.5
        assert Quota.objects.get(user=alice).monthly_limit_usd == Decimal("25.50")
        assert AuditEvent.objects.filter(action="quota_set", target_id=str(alice.pk)).exists()

    def test_staff_make_a_user_unlimited_then_change_it(self, api_client_for, staff, alice):
        client = api_client_for(staff)
        post_json(client, "/users/alice/quota", {"monthly_limit_usd": None}, method="put")
        assert Quota.objects.get(user=alice).monthly_limit_usd is None

        post_json(client, "/users/alice/quota", {"monthly_limit_usd": 0}, method="put")

        assert Quota.objects.get(user=alice).monthly_limit_usd == 0
        assert api_client_for(alice).get("/users/me/quota").json()["remaining_percent"] == 0

    def test_staff_drop_the_row_back_to_the_default(self, api_client_for, staff, alice):
        Quota.objects.create(user=alice, monthly_limit_usd=None)

        response = api_client_for(staff).delete("/users/alice/quota")

        assert response.status_code == 204
        assert not Quota.objects.filter(user=alice).exists()
        assert api_client_for(alice).get("/users/me/quota").json()["monthly_limit_usd"] == 10.0

    def test_dropping_a_missing_row_is_harmless(self, api_client_for, staff, alice):
        assert api_client_for(staff).delete("/users/alice/quota").status_code == 204

    def test_staff_read_a_users_quota(self, api_client_for, staff, alice):
        assert api_client_for(staff).get("/users/alice/quota").json()["monthly_limit_usd"] == 10.0

    @pytest.mark.parametrize(
        "payload",
        [
            {},
            {"monthly_limit_usd": -1},
            {"monthly_limit_usd": "ten"},
            {"monthly_limit_usd": True},
            {"monthly_limit_usd": 1.234},
            {"monthly_limit_usd": 1e20},
            {"monthly_limit_usd": [5]},
            {"monthly_limit_usd": "NaN"},
            {"monthly_limit_usd": "Infinity"},
        ],
    )
    def test_bad_limits_are_refused(self, api_client_for, staff, alice, snapshot, payload):
        before = snapshot()

        response = post_json(api_client_for(staff), "/users/alice/quota", payload, method="put")

        assert response.status_code == 400
        assert "monthly_limit_usd" in response.json()
        assert snapshot() == before

    @pytest.mark.parametrize("username", ["nobody", "al%00ice", "%ED%A0%80", "x" * 300])
    def test_an_unknown_user_is_a_404(self, api_client_for, staff, alice, username):
        response = post_json(
            api_client_for(staff),
            f"/users/{username}/quota",
            {"monthly_limit_usd": 1},
            method="put",
        )

        assert response.status_code == 404
        assert not Quota.objects.exists()

    def test_a_non_staff_user_cannot_set_a_quota(self, api_client_for, alice, bob):
        response = post_json(
            api_client_for(alice), "/users/bob/quota", {"monthly_limit_usd": None}, method="put"
        )

        assert response.status_code == 403
        assert not Quota.objects.exists()
