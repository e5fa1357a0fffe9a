"""The codex executor's settings, checked by `manage.py check` (through `worker.checks`)."""

from django.conf import settings
from django.core.checks import Warning

from controlplane.pricing import PriceTable
from worker.codex.usage import RESUME_USAGE_MODES


def codex_settings_problems() -> list[Warning]:
    """WORKER_CODEX_RESUME_USAGE is a known mode (`worker.W004`); WORKER_CODEX_PRICES is a
    price table of known rates (`worker.W005`)."""
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
