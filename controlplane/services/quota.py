"""One computation of a user's monthly quota, shared by the API, the worker and auto memory."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.models import Quota, Task
from controlplane.services.audit import audit_record


@dataclass(frozen=True)
class QuotaStatus:
    """A user's quota this month. `monthly_limit_usd` None means unlimited."""

    monthly_limit_usd: Decimal | None
    spent_usd: Decimal
    remaining_percent: Decimal

    @property
    def exhausted(self) -> bool:
        return self.remaining_percent <= 0


def month_start(now: datetime) -> datetime:
    """The first instant of `now`'s calendar month in UTC."""
    now_utc = now.astimezone(UTC)
    return now_utc.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(now: datetime) -> datetime:
    start = month_start(now)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def quota_status_get(*, user_id: int, now: datetime | None = None) -> QuotaStatus:
    """Limit, spend and remaining percent (0 to 100, two decimals) of this month's quota."""
    return quota_statuses_get(user_ids=[user_id], now=now)[user_id]


def quota_statuses_get(*, user_ids, now: datetime | None = None) -> dict[int, QuotaStatus]:
    """The quota status of many users in two queries (the batched form of `quota_status_get`)."""
    now = now or timezone.now()
    user_ids = list(dict.fromkeys(user_ids))
    limits = dict(
        Quota.objects.filter(user_id__in=user_ids).values_list("user_id", "monthly_limit_usd")
    )
    spent_by_user = dict(
        Task.objects.filter(
            user_id__in=user_ids,
            created_at__gte=month_start(now),
            created_at__lt=next_month_start(now),
        )
        .order_by()
        .values_list("user_id")
        .annotate(total=Sum("cost_usd"))
        .values_list("user_id", "total")
    )
    default_limit = Decimal(settings.CONTROLPLANE_DEFAULT_MONTHLY_LIMIT_USD)
    return {
        user_id: _status(
            limits.get(user_id, default_limit),
            Decimal(spent_by_user.get(user_id) or 0),
        )
        for user_id in user_ids
    }


def _status(limit: Decimal | None, spent: Decimal) -> QuotaStatus:
    if limit is None:
        remaining = Decimal("100")
    elif limit <= 0:
        remaining = Decimal("0")
    else:
        remaining = (Decimal(100) * (limit - spent) / limit).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )
        remaining = max(Decimal("0"), min(Decimal("100"), remaining))
    return QuotaStatus(monthly_limit_usd=limit, spent_usd=spent, remaining_percent=remaining)


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
