"""Size limits for user-supplied text and the checks every stored string passes.

PostgreSQL cannot store NUL characters and no database can store lone UTF-16 surrogates,
so both are refused up front (with a 400) instead of failing inside the database.
"""

from controlplane.errors import DomainError

PROMPT_MAX_CHARS = 100_000
GOAL_MAX_CHARS = 100_000
MESSAGE_MAX_CHARS = 100_000
MEMORY_MAX_CHARS = 20_000
PROJECT_NAME_MAX_CHARS = 200
# A memory's code citations: how many, how long a path, how far down a file.
MEMORY_MAX_CITATIONS = 20
MEMORY_CITATION_PATH_MAX_CHARS = 1024
MEMORY_CITATION_MAX_LINE = 10_000_000


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored, or None when it can."""
    if "\x00" in value:
        return "NUL characters are not allowed."
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "Text must be valid Unicode (no lone surrogates)."
    return None


def text_require(value: str, *, field: str, max_chars: int) -> str:
    """Return `value` if it is storable, non-blank and at most `max_chars` long; else raise."""
    if not isinstance(value, str):
        raise DomainError("Not a valid string.", field=field)
    problem = text_problem(value)
    if problem:
        raise DomainError(problem, field=field)
    if not value.strip():
        raise DomainError("This field may not be blank.", field=field)
    if len(value) > max_chars:
        raise DomainError(
            f"Ensure this field has no more than {max_chars} characters.", field=field
        )
    return value
