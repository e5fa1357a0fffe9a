"""Start-up checks of the worker settings, shown by every command (`manage.py check`).

Warnings rather than errors: the API server and migrations do not need a worker, and the
worker itself refuses to start with an unknown executor.
"""

import shlex

from django.conf import settings
from django.core.checks import Warning, register

from controlplane.pricing import PriceTable


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
    retry = settings.WORKER_FINISH_RETRY_SECONDS
    if retry < 0:
        problems.append(Warning("WORKER_FINISH_RETRY_SECONDS must be 0 or more.", id="worker.W006"))
    elif retry < settings.WORKER_STALE_AFTER_SECONDS:
        problems.append(
            Warning(
                "WORKER_FINISH_RETRY_SECONDS is below WORKER_STALE_AFTER_SECONDS: a worker "
                "that finished a turn during a database outage may drop its result while the "
                "task is still its own, and the task then runs again.",
                id="worker.W006",
            )
        )
    return problems


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
    table = PriceTable(settings.WORKER_CODEX_PRICES, name="WORKER_CODEX_PRICES")
    problems.extend(
        Warning(problem, id="worker.W005") for problem in table.problems(require_default=False)
    )
    return problems
