"""App settings, read lazily from Django settings under the `AUTOMEMORY_` prefix.

Tests override them with pytest-django's `settings` fixture; nothing is cached at import.
"""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # How many memories of each scope the first turn of a task receives.
    "INJECT_USER_LIMIT": 5,
    "INJECT_PROJECT_LIMIT": 5,
    # Content of an auto memory: first goal/prompt line (capped) + start of the result.
    "GOAL_LINE_MAX_CHARS": 200,
    "RESULT_EXCERPT_CHARS": 800,
    # The most tasks one sweep examines; the rest wait for the next round.
    "SWEEP_BATCH_SIZE": 500,
}


def get(name: str) -> Any:
    """Return `AUTOMEMORY_<name>` from Django settings, else the app default."""
    return getattr(settings, f"AUTOMEMORY_{name}", DEFAULTS[name])
