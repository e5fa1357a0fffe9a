"""Start-up checks of the `AUTOMEMORY_*` settings (`manage.py check` and every command)."""

from django.core.checks import Error, register
from django.utils.module_loading import import_string

from automemory import conf

POSITIVE_INTEGERS = (
    "INJECT_USER_LIMIT",
    "INJECT_PROJECT_LIMIT",
    "GOAL_LINE_MAX_CHARS",
    "RESULT_EXCERPT_CHARS",
    "SWEEP_BATCH_SIZE",
    "QUOTA_LOW_RETRY_SECONDS",
    "QUOTA_CHECK_RETRY_SECONDS",
)


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
    return errors
