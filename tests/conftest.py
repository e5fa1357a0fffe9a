"""Shared fixtures: alice owns a project, bob is a member, vera a viewer, charlie a stranger;
factories for tasks and memories, and the one "auto memory on" switch."""

import itertools
import os
import socket
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from automemory.models import (
    MEMORY_STATE_FIELDS,
    AutoMemorySettings,
    MemorySourceTask,
    MemoryState,
    TaskMemoryState,
)
from automemory.services.memory_goals import memory_goal_store
from automemory.services.search import memory_keywords_set
from controlplane.models import (
    ApiToken,
    IdentityMemory,
    Membership,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    Project,
    Role,
    Task,
    TaskStatus,
)
from controlplane.services.tokens import token_key_hash, token_key_new, token_visible_prefix

User = get_user_model()
_counter = itertools.count(1)


def _is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL)")
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)


@pytest.fixture
def root(user_factory):
    """A superuser, for the admin's pages."""
    user = user_factory("root", is_staff=True)
    user.is_superuser = True
    user.save()
    return user


@pytest.fixture
def local_redis() -> str:
    """The URL of the real Redis on 127.0.0.1:6379: skipped without one, failed in CI."""
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        if os.environ.get("CI"):
            pytest.fail("Redis is not reachable on 127.0.0.1:6379 (required in CI)")
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    return "redis://127.0.0.1:6379/0"


@pytest.fixture
def user_factory(db):
    def make(username: str | None = None, *, is_staff: bool = False):
        username = username or f"user{next(_counter)}"
        return User.objects.create_user(
            username=username, password="pw-" + username, is_staff=is_staff
        )

    return make


@pytest.fixture
def alice(user_factory):
    return user_factory("alice")


@pytest.fixture
def bob(user_factory):
    return user_factory("bob")


@pytest.fixture
def vera(user_factory):
    return user_factory("vera")


@pytest.fixture
def charlie(user_factory):
    return user_factory("charlie")


@pytest.fixture
def staff(user_factory):
    return user_factory("sam", is_staff=True)


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
def project_factory(db):
    def make(owner, name: str | None = None, *, members=(), viewers=()):
        project = Project.objects.create(name=name or f"project {next(_counter)}", created_by=owner)
        Membership.objects.create(project=project, user=owner, role=Role.OWNER)
        for user in members:
            Membership.objects.create(project=project, user=user, role=Role.MEMBER)
        for user in viewers:
            Membership.objects.create(project=project, user=user, role=Role.VIEWER)
        return project

    return make


@pytest.fixture
def project(project_factory, alice, bob, vera):
    return project_factory(alice, "webapp", members=[bob], viewers=[vera])


@pytest.fixture
def task_factory(db):
    """Tasks in any state; `completed=True` sets plausible timestamps and a long result."""

    def make(
        project,
        user=None,
        *,
        prompt="Fix the login bug",
        status=TaskStatus.QUEUED,
        completed=False,
        finished_ago=timedelta(hours=1),
        duration=timedelta(minutes=5),
        result_text=None,
        **fields,
    ):
        user = user or project.created_by
        if completed:
            status = TaskStatus.COMPLETED
            finished = timezone.now() - finished_ago
            fields.setdefault("finished_at", finished)
            fields.setdefault("started_at", finished - duration)
            if result_text is None:
                result_text = "Done. " + "The fix changes the session check in auth.py. " * 10
        # Auto memory's state of the task (its own table): the running turn's key hash
        # (valid for the task's claim) and the memories injected into its first turn.
        key_hash = fields.pop("memory_key_hash", "")
        injected = fields.pop("injected_memory_ids", None)
        if key_hash:
            fields.setdefault("claimed_at", timezone.now())
        task = Task.objects.create(
            project=project,
            user=user,
            prompt=prompt,
            status=status,
            result_text=result_text or "",
            queued_at=timezone.now(),
            **fields,
        )
        if key_hash or injected:
            TaskMemoryState.objects.create(
                task=task,
                memory_key_hash=key_hash,
                key_claimed_at=task.claimed_at if key_hash else None,
                injected_memory_ids=injected or [],
            )
        return task

    return make


@pytest.fixture
def memory_factory(db):
    """Memories of any kind. A project memory when `project` is given (its author `user`,
    else the project's creator), else a user-level memory of `user`. An auto memory with a
    `source_task` gets its provenance link, as the sweep writes it."""

    def make(
        *,
        project=None,
        user=None,
        content=None,
        source=MemorySource.MANUAL,
        status=MemoryStatus.ACTIVE,
        source_task=None,
        **fields,
    ) -> IdentityMemory:
        scope = MemoryScope.PROJECT if project is not None else MemoryScope.USER
        author = user or (project.created_by if project is not None else None)
        fields.setdefault("created_by", author)
        # Auto memory's own rows of the memory (usage counters, report hold, instruction
        # flags and their approval; an auto memory's goal), when given.
        memory = memory_stored(
            scope=fields.pop("scope", scope),
            project=project,
            user=author if scope == MemoryScope.USER else None,
            content=content or f"Remember fact number {next(_counter)}.",
            source=source,
            status=status,
            source_task=source_task,
            **fields,
        )
        if source_task is not None:
            MemorySourceTask.objects.get_or_create(memory=memory, task=source_task)
        return memory

    return make


def memory_stored(**fields) -> IdentityMemory:
    """`IdentityMemory.objects.create(**fields)`, the values of auto memory's own rows of it
    among them: `MEMORY_STATE_FIELDS` (counters, report hold, instruction flags, approval)
    in its `MemoryState`; an auto memory's `goal_key` and `source_finished_at` in its
    `MemoryGoal`, as the writer stores it; `keywords` in its `MemorySearch`."""
    keywords = fields.pop("keywords", None)
    state = {name: fields.pop(name) for name in MEMORY_STATE_FIELDS if name in fields}
    goal = {name: fields.pop(name) for name in ("goal_key", "source_finished_at") if name in fields}
    memory = IdentityMemory.objects.create(**fields)
    if keywords:
        memory_keywords_set(memory.pk, keywords)
    if state:
        MemoryState.objects.create(memory=memory, **state)
    if memory.source == MemorySource.AUTO or any(goal.values()):
        memory_goal_store(
            memory,
            goal_key=goal.get("goal_key", ""),
            source_finished_at=goal.get("source_finished_at"),
        )
    return memory


def memory_usage_of(memory: IdentityMemory) -> MemoryState:
    """The memory's usage counters, report hold, instruction flags and approval as stored
    now (auto memory's row; the defaults when it has none)."""
    return MemoryState.objects.filter(memory_id=memory.pk).first() or MemoryState(
        memory_id=memory.pk
    )


@pytest.fixture
def auto_memory_on(db):
    """`auto_memory_on(user, **overrides)`: the user's generate and use switches on, with any
    other setting overridden; returns the settings row."""

    def enable(user, **overrides) -> AutoMemorySettings:
        values = {"generate_memories": True, "use_memories": True, **overrides}
        settings, _ = AutoMemorySettings.objects.update_or_create(user=user, defaults=values)
        return settings

    return enable


def api_token_for(user, *, name: str = "tests", **fields) -> str:
    """A new API token row for `user` (as token_create stores it, without an audit event);
    returns its key."""
    key = token_key_new()
    ApiToken.objects.create(
        user=user,
        name=name,
        prefix=token_visible_prefix(key),
        key_hash=token_key_hash(key),
        **fields,
    )
    return key


@pytest.fixture
def api_client_for():
    """An APIClient authenticated with the user's token (anonymous for None)."""

    def make(user=None):
        client = APIClient()
        if user is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
        return client

    return make


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Tests create many users with passwords; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    """Throttle counters live in the cache: each test starts with none."""
    cache.clear()
    yield
    cache.clear()
