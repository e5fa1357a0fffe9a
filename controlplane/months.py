"""Calendar months in UTC: the one home of month bounds for quotas, the ledger and budgets.

A month's spend is what finished from its first instant (inclusive) to the next month's first
instant (exclusive), in UTC, wherever the server runs.
"""

from datetime import UTC, date, datetime


def month_of(moment: datetime) -> date:
    """The first day of `moment`'s calendar month in UTC (the key of monthly totals)."""
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """The first instant of `month` and of the month after it, in UTC."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    if month.month == 12:
        return start, start.replace(year=month.year + 1, month=1)
    return start, start.replace(month=month.month + 1)


def month_start(moment: datetime) -> datetime:
    """The first instant of `moment`'s calendar month in UTC."""
    return month_bounds(month_of(moment))[0]


def next_month_start(moment: datetime) -> datetime:
    """The first instant of the UTC month after `moment`'s."""
    return month_bounds(month_of(moment))[1]
