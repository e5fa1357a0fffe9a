"""App settings, read lazily from Django settings under the `AUTOMEMORY_` prefix.

Tests override them with pytest-django's `settings` fixture; nothing is cached at import.
"""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Dotted path of the callable `(task) -> str` that writes a memory's text. The default is
    # the deterministic v1 excerpt; a model-based extractor plugs in here.
    "CONTENT_STRATEGY": "automemory.services.content.memory_content",
    # How many memories of each scope the first turn of a task receives.
    "INJECT_USER_LIMIT": 5,
    "INJECT_PROJECT_LIMIT": 5,
    # Content of an auto memory: first goal/prompt line (capped) + start of the result.
    "GOAL_LINE_MAX_CHARS": 200,
    "RESULT_EXCERPT_CHARS": 800,
    # The most tasks one sweep examines; the rest wait for the next round.
    "SWEEP_BATCH_SIZE": 500,
    # How long the worker's sweep waits before it looks again at a task skipped for a low
    # quota, or whose quota could not be read; errors back off from 1 minute to 1 hour.
    "QUOTA_LOW_RETRY_SECONDS": 600,
    "QUOTA_CHECK_RETRY_SECONDS": 60,
}


def get(name: str) -> Any:
    """Return `AUTOMEMORY_<name>` from Django settings, else the app default."""
    return getattr(settings, f"AUTOMEMORY_{name}", DEFAULTS[name])
