"""Fixtures for the host API tests: clients per role and a memory factory."""

import pytest

from .helpers import row_counts

ROLES = ["anonymous", "stranger", "viewer", "member", "owner", "staff"]


@pytest.fixture
def snapshot():
    """`snapshot()` returns the current row counts of every host table."""
    return row_counts
