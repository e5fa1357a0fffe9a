"""Fixtures for the host API tests: clients per role and a memory factory."""

import pytest

from controlplane.models import IdentityMemory, MemoryScope, MemorySource, MemoryStatus

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
def memory_factory(db):
    def make(*, project=None, user=None, content="Use pytest for tests.", **fields):
        if project is not None:
            fields.setdefault("scope", MemoryScope.PROJECT)
        else:
            fields.setdefault("scope", MemoryScope.USER)
        fields.setdefault("source", MemorySource.MANUAL)
        fields.setdefault("status", MemoryStatus.ACTIVE)
        return IdentityMemory.objects.create(project=project, user=user, content=content, **fields)

    return make


@pytest.fixture
def snapshot():
    """`snapshot()` returns the current row counts of every host table."""
    return row_counts
