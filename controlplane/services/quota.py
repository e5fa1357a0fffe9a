"""One computation of a user's monthly quota, shared by the API, the worker and auto memory.

Spend is what the usage ledger recorded as finished in the current UTC calendar month, read
from the user's monthly total (one indexed row, whatever the history). Percentages are exact
Decimals: nothing is rounded before a comparison; the API rounds for display only.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_DOWN, ROUND_FLOOR, Decimal, localcontext

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.models import MonthlySpend, Quota
from controlplane.months import month_of
from controlplane.rawsql import Scalar, column, table
from controlplane.services.audit import audit_record
from controlplane.services.usage import monthly_spend_get


@dataclass(frozen=True)
class QuotaStatus:
    """A user's quota this month. `monthly_limit_usd` None means unlimited.

    `spent_usd` is None only when the limit alone decides (unlimited, or 0) and the caller
    said it needs no spend (`always_read_spend=False`).
    """

    monthly_limit_usd: Decimal | None
    spent_usd: Decimal | None
    remaining_percent: Decimal

    @property
    def exhausted(self) -> bool:
        return self.remaining_percent <= 0

    @property
    def remaining_percent_display(self) -> Decimal:
        """The remaining percent rounded down to 2 decimals, for messages (never compare it)."""
        return self.remaining_percent.quantize(Decimal("0.01"), rounding=ROUND_DOWN)


def quota_status_get(
    *, user_id: int, now: datetime | None = None, always_read_spend: bool = True
) -> QuotaStatus:
    """Limit, spend and exact remaining percent (0 to 100) of this month's quota."""
    return quota_statuses_get(user_ids=[user_id], now=now, always_read_spend=always_read_spend)[
        user_id
    ]


def quota_statuses_get(
    *, user_ids, now: datetime | None = None, always_read_spend: bool = True
) -> dict[int, QuotaStatus]:
    """The quota status of many users in two queries: the quota rows, then the users' monthly
    totals (one indexed row each).

    Runs finished in the current UTC month count, whenever their task was created. With
    `always_read_spend=False` the spend of users whose limit alone decides (unlimited, or 0)
    is not read: the worker's refusal needs no spend to pass an unlimited user.
    """
    now = now or timezone.now()
    user_ids = list(dict.fromkeys(user_ids))
    limits = dict(
        Quota.objects.filter(user_id__in=user_ids).values_list("user_id", "monthly_limit_usd")
    )
    limit_of = {
        user_id: _limit(has_row=user_id in limits, limit=limits.get(user_id))
        for user_id in user_ids
    }
    to_read = [
        user_id
        for user_id, limit in limit_of.items()
        if always_read_spend or (limit is not None and limit > 0)
    ]
    spent_by_user = monthly_spend_get(user_ids=to_read, month=month_of(now))
    return {
        user_id: _status(
            limit_of[user_id],
            Decimal(spent_by_user.get(user_id) or 0) if user_id in to_read else None,
        )
        for user_id in user_ids
    }


def quota_sql(*, user_id_sql: str, now: datetime) -> list[Scalar]:
    """The quota read folded into another statement (the worker's claim): whether the user
    has a quota row, its limit, and this month's total, as scalar subqueries on the user id
    column `user_id_sql`; `quota_status_from` turns their values into the status."""
    quotas, spends = table(Quota), table(MonthlySpend)
    quota_user = f"q.{column(Quota, 'user')} = {user_id_sql}"
    return [
        Scalar("quota_has_row", f"SELECT 1 FROM {quotas} q WHERE {quota_user}"),
        Scalar(
            "quota_limit_usd",
            f"SELECT q.{column(Quota, 'monthly_limit_usd')} FROM {quotas} q WHERE {quota_user}",
            field=Quota._meta.get_field("monthly_limit_usd"),
        ),
        Scalar(
            "quota_spent_usd",
            f"SELECT s.{column(MonthlySpend, 'total_usd')} FROM {spends} s"
            f" WHERE s.{column(MonthlySpend, 'user')} = {user_id_sql}"
            f" AND s.{column(MonthlySpend, 'month')} = %s",
            (connection.ops.adapt_datefield_value(month_of(now)),),
            field=MonthlySpend._meta.get_field("total_usd"),
        ),
    ]


def quota_status_from(values: dict) -> QuotaStatus:
    """The status from the values `quota_sql` read: the same rules as `quota_statuses_get`."""
    limit = _limit(has_row=values["quota_has_row"] is not None, limit=values["quota_limit_usd"])
    return _status(limit, Decimal(values["quota_spent_usd"] or 0))


def _limit(*, has_row: bool, limit: Decimal | None) -> Decimal | None:
    """A user's limit: the row's (NULL: unlimited), else the default."""
    if has_row:
        return limit
    return Decimal(settings.CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD)


def _status(limit: Decimal | None, spent: Decimal | None) -> QuotaStatus:
    if limit is None:
        remaining = Decimal("100")
    elif limit <= 0:
        remaining = Decimal("0")
    else:
        remaining = remaining_percent(limit=limit, spent=spent or Decimal("0"))
    return QuotaStatus(monthly_limit_usd=limit, spent_usd=spent, remaining_percent=remaining)


def remaining_percent(*, limit: Decimal, spent: Decimal) -> Decimal:
    """100 * (limit - spent) / limit, clamped to 0..100, never rounded up.

    Limits have 2 decimals and spend 6, so a remaining percent that differs from a threshold
    differs by far more than the 34 digits kept here: comparisons with it are exact. Rounding
    towards floor means a value just under a threshold can never be carried onto it.
    """
    with localcontext(prec=34, rounding=ROUND_FLOOR):
        remaining = Decimal(100) * (limit - spent) / limit
    return max(Decimal("0"), min(Decimal("100"), remaining))


@transaction.atomic
def quota_set(*, actor, user, monthly_limit_usd: Decimal | None) -> Quota:
    """Set the user's monthly limit; None means unlimited."""
    if monthly_limit_usd is not None and monthly_limit_usd < 0:
        raise DomainError(
            "Ensure this value is greater than or equal to 0.", field="monthly_limit_usd"
        )
    quota, _ = Quota.objects.update_or_create(
        user=user, defaults={"monthly_limit_usd": monthly_limit_usd}
    )
    audit_record(
        action="quota_set",
        actor=actor,
        target_type="user",
        target_id=user.pk,
        data={"monthly_limit_usd": None if monthly_limit_usd is None else str(monthly_limit_usd)},
    )
    return quota


@transaction.atomic
def quota_reset(*, actor, user) -> bool:
    """Drop the user's quota row (back to the default limit). Returns whether there was one."""
    deleted, _ = Quota.objects.filter(user=user).delete()
    audit_record(
        action="quota_reset",
        actor=actor,
        target_type="user",
        target_id=user.pk,
        data={"had_row": bool(deleted)},
    )
    return bool(deleted)
