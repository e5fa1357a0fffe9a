"""Fixtures for the host API tests: clients per role and a memory factory."""

import pytest

from .helpers import row_counts

ROLES = ["anonymous", "stranger", "viewer", "member", "owner", "staff"]


@pytest.fixture
def user_for_role(project, alice, bob, vera, charlie, staff):
    """The user who plays each role on `project` (None for anonymous)."""
    return {
        "anonymous": None,
        "stranger": charlie,
        "viewer": vera,
        "member": bob,
        "owner": alice,
        "staff": staff,
    }


@pytest.fixture
def snapshot():
    """`snapshot()` returns the current row counts of every host table."""
    return row_counts
