"""Start-up checks of the `AUTOMEMORY_*` settings (`manage.py check` and every command)."""

from django.core.checks import Error, register
from django.utils.module_loading import import_string

from automemory import conf
from controlplane.pricing import PriceTable

POSITIVE_INTEGERS = (
    "INJECT_USER_LIMIT",
    "INJECT_PROJECT_LIMIT",
    "GOAL_LINE_MAX_CHARS",
    "RESULT_EXCERPT_CHARS",
    "SWEEP_BATCH_SIZE",
    "QUOTA_LOW_RETRY_SECONDS",
    "QUOTA_CHECK_RETRY_SECONDS",
    "RETENTION_BATCH_SIZE",
    "RETENTION_INTERVAL_SECONDS",
    "CONSOLIDATION_CANDIDATES",
    "MEMORY_MAX_CHARS",
    "MODEL_INPUT_GOAL_CHARS",
    "MODEL_INPUT_PROMPT_CHARS",
    "MODEL_INPUT_RESULT_CHARS",
    "MODEL_INPUT_EVENTS",
    "MODEL_UNAVAILABLE_RETRY_SECONDS",
    "MODEL_UNAVAILABLE_RETRY_MAX_SECONDS",
    "EXTRACTION_CLAIM_SECONDS",
)
NON_NEGATIVE_INTEGERS = ("MODEL_MAX_RETRIES", "MODEL_CALLS_PER_SWEEP")


@register()
def automemory_settings_check(app_configs=None, **kwargs) -> list[Error]:
    errors = []
    path = conf.get("CONTENT_STRATEGY")
    try:
        strategy = import_string(path)
    except ImportError as exc:
        errors.append(
            Error(
                f"AUTOMEMORY_CONTENT_STRATEGY {path!r} cannot be imported: {exc}",
                id="automemory.E001",
            )
        )
    else:
        if not callable(strategy):
            errors.append(
                Error(
                    f"AUTOMEMORY_CONTENT_STRATEGY {path!r} is not callable.", id="automemory.E002"
                )
            )
    for name in POSITIVE_INTEGERS:
        value = conf.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(
                Error(
                    f"AUTOMEMORY_{name} must be a positive integer, not {value!r}.",
                    id="automemory.E003",
                )
            )
    errors.extend(Error(problem, id="automemory.E004") for problem in price_table_problems())
    timeout = conf.get("MODEL_TIMEOUT_SECONDS")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        errors.append(
            Error(
                f"AUTOMEMORY_MODEL_TIMEOUT_SECONDS must be a positive number, not {timeout!r}.",
                id="automemory.E005",
            )
        )
    for name in NON_NEGATIVE_INTEGERS:
        value = conf.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors.append(
                Error(
                    f"AUTOMEMORY_{name} must be a non-negative integer, not {value!r}.",
                    id="automemory.E006",
                )
            )
    return errors


def price_table_problems() -> list[str]:
    """What is wrong with `AUTOMEMORY_MODEL_PRICES`, one message per problem.

    A malformed table would bill model calls at a wrong rate, so the memory budget would not
    hold: the process refuses to start instead.
    """
    return PriceTable(conf.get("MODEL_PRICES"), name="AUTOMEMORY_MODEL_PRICES").problems()
