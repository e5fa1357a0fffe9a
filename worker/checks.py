"""Start-up checks of the worker settings, shown by every command (`manage.py check`).

Warnings rather than errors: the API server and migrations do not need a worker, and the
worker itself refuses to start with an unknown executor.
"""

import shlex
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.checks import Warning, register


@register()
def worker_settings_check(app_configs=None, **kwargs) -> list[Warning]:
    from worker.executors import EXECUTORS

    problems = []
    name = settings.WORKER_EXECUTOR
    if name not in EXECUTORS:
        known = ", ".join(sorted(EXECUTORS))
        problems.append(
            Warning(
                f"WORKER_EXECUTOR {name!r} is not an executor (known: {known}).", id="worker.W001"
            )
        )
    if name == "command":
        try:
            argv = shlex.split(settings.WORKER_COMMAND)
        except ValueError as exc:
            argv = None
            problems.append(Warning(f"WORKER_COMMAND cannot be parsed: {exc}", id="worker.W002"))
        if argv == []:
            problems.append(
                Warning(
                    "WORKER_EXECUTOR is 'command' but WORKER_COMMAND is empty.", id="worker.W002"
                )
            )
    problems += _codex_settings_problems()
    if settings.WORKER_STALE_AFTER_SECONDS <= 2 * settings.WORKER_HEARTBEAT_SECONDS:
        problems.append(
            Warning(
                "WORKER_STALE_AFTER_SECONDS should be well above WORKER_HEARTBEAT_SECONDS, or "
                "live tasks may be taken for stale and run twice.",
                id="worker.W003",
            )
        )
    return problems


PRICE_RATES = ("input", "cached_input", "cache_write", "output")


def _codex_settings_problems() -> list[Warning]:
    from worker.executors.codex import RESUME_USAGE_MODES

    problems = []
    mode = settings.WORKER_CODEX_RESUME_USAGE
    if mode not in RESUME_USAGE_MODES:
        problems.append(
            Warning(
                f"WORKER_CODEX_RESUME_USAGE {mode!r} is not one of "
                f"{', '.join(RESUME_USAGE_MODES)}; resumed codex turns are read as auto.",
                id="worker.W004",
            )
        )
    prices = settings.WORKER_CODEX_PRICES
    if not isinstance(prices, dict):
        return [*problems, Warning("WORKER_CODEX_PRICES must be a JSON object.", id="worker.W005")]
    for model, table in prices.items():
        if not isinstance(table, dict):
            problems.append(
                Warning(f"WORKER_CODEX_PRICES[{model!r}] must be an object.", id="worker.W005")
            )
            continue
        for rate in set(table) - set(PRICE_RATES):
            problems.append(
                Warning(
                    f"WORKER_CODEX_PRICES[{model!r}] has an unknown rate {rate!r} "
                    f"(known: {', '.join(PRICE_RATES)}).",
                    id="worker.W005",
                )
            )
        for rate in set(table) & set(PRICE_RATES):
            try:
                valid = Decimal(str(table[rate])).is_finite() and Decimal(str(table[rate])) >= 0
            except (InvalidOperation, ValueError):
                valid = False
            if not valid:
                problems.append(
                    Warning(
                        f"WORKER_CODEX_PRICES[{model!r}][{rate!r}] must be a number >= 0.",
                        id="worker.W005",
                    )
                )
    return problems
