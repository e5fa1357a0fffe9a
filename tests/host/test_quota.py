"""The monthly quota: the computation's edge cases and the endpoints."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from freezegun import freeze_time

from controlplane.models import AuditEvent, Quota, Task
from controlplane.services.quota import quota_status_get

from .helpers import post_json

pytestmark = pytest.mark.django_db


def spend(task_factory, project, user, amount: str, *, when: datetime | None = None):
    task = task_factory(project, user, completed=True, cost_usd=Decimal(amount))
    if when is not None:
        Task.objects.filter(pk=task.pk).update(created_at=when)
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


class TestEndpoints:
    def test_a_user_reads_their_quota(self, api_client_for, alice, project, task_factory):
        spend(task_factory, project, alice, "2.5")

        body = api_client_for(alice).get("/users/me/quota").json()

        assert body == {"monthly_limit_usd": 10.0, "spent_usd": 2.5, "remaining_percent": 75.0}

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
