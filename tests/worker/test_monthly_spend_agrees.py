"""The month's spend is one upsert (`month_upsert_sql`) run three ways: by `usage_record` on
PostgreSQL, by the worker's finish on PostgreSQL (in its one statement), and by the ledger's
trigger on SQLite. The same runs give the same spend on either database: the figures below
hold on both (the suite runs on SQLite, and on PostgreSQL with DATABASE_URL)."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from controlplane.models import MonthlySpend, UsageKind
from controlplane.months import month_of
from controlplane.services.usage import monthly_spend_verify, usage_record
from tests.worker.test_running import _priced, _Turns

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_same_runs_give_the_same_spend_through_every_writer(
    project, alice, bob, task_factory, worker_factory
):
    for _ in range(2):
        task_factory(project, user=alice)
    worker = worker_factory(_Turns(_priced("0.0018"), _priced("0.000001")))
    worker.run_once()
    worker.run_once()
    last_instant = datetime(2020, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    for user, cost, finished_at in [
        (alice, "1.5", last_instant),
        (alice, "0", last_instant),
        (bob, "0.25", last_instant),
        (bob, "0.125", datetime(2020, 10, 1, tzinfo=UTC)),
    ]:
        usage_record(
            user_id=user.pk,
            cost_usd=Decimal(cost),
            finished_at=finished_at,
            kind=UsageKind.MEMORY_EXTRACTION,
        )

    months = {
        (row.user_id, row.month): (row.total_usd, row.entries) for row in MonthlySpend.objects.all()
    }
    assert months == {
        (alice.pk, month_of(timezone.now())): (Decimal("0.001801"), 2),
        (alice.pk, datetime(2020, 11, 1).date()): (Decimal("1.5"), 2),
        (bob.pk, datetime(2020, 11, 1).date()): (Decimal("0.25"), 1),
        (bob.pk, datetime(2020, 10, 1).date()): (Decimal("0.125"), 1),
    }
    assert monthly_spend_verify() == []
