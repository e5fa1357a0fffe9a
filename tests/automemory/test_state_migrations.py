"""Auto memory's state moves out of the host's tables without losing a value: rows written
through the historical models of the migrations before the move, migrated forward, read back
through the current models; and migrated back, read through the historical models again."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from automemory.models import MemoryGoal, MemorySourceTask, MemoryState, TaskMemoryState
from controlplane.models import IdentityMemory, Task
from tests.automemory.helpers import historical_apps, migrate_to_latest, migration_executor

pytestmark = pytest.mark.django_db(transaction=True)

# The last migrations before auto memory's state left the host's tables.
BEFORE = [
    ("automemory", "0019_memory_citations"),
    ("controlplane", "0018_repositories_and_task_branches"),
]


@pytest.fixture
def before():
    """The database at BEFORE, and the historical models' registry there; the latest
    migrations again afterwards, as the other tests expect."""
    executor = migration_executor()
    executor.migrate(BEFORE)
    yield historical_apps(BEFORE)
    migrate_to_latest()


def _fill(apps) -> dict:
    """Tasks with every moved field set (a running turn's key, injected ids, both, neither),
    written through the historical models."""
    User = apps.get_model("auth", "User")
    Project = apps.get_model("controlplane", "Project")
    HistoricalTask = apps.get_model("controlplane", "Task")
    alice = User.objects.create(username="alice")
    project = Project.objects.create(name="webapp", created_by=alice)
    claimed = timezone.now() - timedelta(minutes=3)

    def task(**fields):
        return HistoricalTask.objects.create(project=project, user=alice, prompt="p", **fields)

    return {
        "running": task(status="running", claimed_at=claimed, memory_key_hash="a" * 64),
        "injected": task(status="completed", injected_memory_ids=[3, 1, 2]),
        "both": task(
            status="running",
            claimed_at=claimed,
            memory_key_hash="b" * 64,
            injected_memory_ids=[7],
        ),
        "odd": task(status="completed", injected_memory_ids=[5, "junk", -1, 5]),
        "neither": task(status="completed"),
        "claimed_at": claimed,
    }


def test_the_task_state_arrives_whole_and_goes_back(before):
    rows = _fill(before)
    claimed = rows["claimed_at"]

    migrate_to_latest()

    states = {state.task_id: state for state in TaskMemoryState.objects.all()}
    running, injected, both, odd = (rows[k].pk for k in ("running", "injected", "both", "odd"))
    assert set(states) == {running, injected, both, odd}  # a task with neither has no row
    assert (states[running].memory_key_hash, states[running].key_claimed_at) == ("a" * 64, claimed)
    assert states[running].injected_memory_ids == []
    assert states[injected].memory_key_hash == "" and states[injected].key_claimed_at is None
    assert states[injected].injected_memory_ids == [3, 1, 2]
    assert (states[both].memory_key_hash, states[both].injected_memory_ids) == ("b" * 64, [7])
    assert states[odd].injected_memory_ids == [5, "junk", -1, 5]  # stored as it was
    assert states[odd].injected_ids == [5]
    assert not hasattr(Task(), "memory_key_hash") and not hasattr(Task(), "injected_memory_ids")

    executor = migration_executor()
    executor.migrate(BEFORE)
    HistoricalTask = historical_apps(BEFORE).get_model("controlplane", "Task")
    back = {
        task.pk: (task.memory_key_hash, task.injected_memory_ids)
        for task in HistoricalTask.objects.all()
    }
    assert back == {
        running: ("a" * 64, []),
        injected: ("", [3, 1, 2]),
        both: ("b" * 64, [7]),
        odd: ("", [5, "junk", -1, 5]),
        rows["neither"].pk: ("", []),
    }


def test_a_running_turns_key_keeps_working_across_the_migration(before):
    """The copy carries the claim's time the key is checked against."""
    from automemory.services.task_keys import task_key_authenticate, task_key_new

    minted = task_key_new()
    User = before.get_model("auth", "User")
    Project = before.get_model("controlplane", "Project")
    Membership = before.get_model("controlplane", "Membership")
    alice = User.objects.create(username="alice", is_active=True)
    project = Project.objects.create(name="webapp", created_by=alice)
    Membership.objects.create(project=project, user=alice, role="owner")
    task = before.get_model("controlplane", "Task").objects.create(
        project=project,
        user=alice,
        prompt="p",
        status="running",
        claimed_at=timezone.now(),
        memory_key_hash=minted.key_hash,
    )

    migrate_to_latest()

    assert task_key_authenticate(key=minted.key).pk == task.pk


USAGE = (
    "injection_count",
    "last_injected_at",
    "cite_count",
    "last_cited_at",
    "report_count",
    "last_reported_at",
    "report_hold_at",
)


def test_the_memory_usage_and_report_hold_arrive_whole_and_go_back(before):
    User = before.get_model("auth", "User")
    Project = before.get_model("controlplane", "Project")
    HistoricalMemory = before.get_model("controlplane", "IdentityMemory")
    alice = User.objects.create(username="alice")
    project = Project.objects.create(name="webapp", created_by=alice)
    now = timezone.now()
    used = {
        "injection_count": 12,
        "last_injected_at": now - timedelta(hours=1),
        "cite_count": 3,
        "last_cited_at": now - timedelta(hours=2),
        "report_count": 2,
        "last_reported_at": now - timedelta(hours=3),
        "report_hold_at": now - timedelta(hours=4),
    }
    only_held = {**dict.fromkeys(USAGE, None), "report_hold_at": now, "injection_count": 0}
    only_held.update(cite_count=0, report_count=0)

    def memory(**fields):
        return HistoricalMemory.objects.create(
            scope="project", project=project, content="c", created_by=alice, **fields
        )

    full, held, unused = memory(**used), memory(report_hold_at=now), memory()

    migrate_to_latest()

    states = {
        state.memory_id: {name: getattr(state, name) for name in USAGE}
        for state in MemoryState.objects.all()
    }
    assert states == {full.pk: used, held.pk: only_held}  # an unused memory has no row
    for name in USAGE:
        assert not hasattr(IdentityMemory(), name)

    executor = migration_executor()
    executor.migrate(BEFORE)
    Historical = historical_apps(BEFORE).get_model("controlplane", "IdentityMemory")
    back = {m.pk: {name: getattr(m, name) for name in USAGE} for m in Historical.objects.all()}
    assert back[full.pk] == used
    assert back[held.pk] == only_held
    assert back[unused.pk] == {
        **dict.fromkeys(USAGE, None),
        **dict.fromkeys(("injection_count", "cite_count", "report_count"), 0),
    }


def test_the_provenance_links_arrive_whole_and_go_back(before):
    """The host's links become auto memory's (the same rows, under auto memory's table)."""
    User = before.get_model("auth", "User")
    Project = before.get_model("controlplane", "Project")
    HistoricalTask = before.get_model("controlplane", "Task")
    HistoricalMemory = before.get_model("controlplane", "IdentityMemory")
    HistoricalLink = before.get_model("controlplane", "MemorySourceTask")
    alice = User.objects.create(username="alice")
    project = Project.objects.create(name="webapp", created_by=alice)
    first, merged = (
        HistoricalTask.objects.create(project=project, user=alice, prompt=p) for p in "ab"
    )
    memory = HistoricalMemory.objects.create(
        scope="project", project=project, content="c", source="auto", source_task=first
    )
    at = timezone.now() - timedelta(days=1)
    made = HistoricalLink.objects.create(memory=memory, task=first, created_at=at)
    joined = HistoricalLink.objects.create(memory=memory, task=merged, merged=True)

    migrate_to_latest()

    links = {
        link.pk: (link.memory_id, link.task_id, link.merged, link.created_at)
        for link in MemorySourceTask.objects.all()
    }
    assert links == {
        made.pk: (memory.pk, first.pk, False, at),
        joined.pk: (memory.pk, merged.pk, True, joined.created_at),
    }
    assert MemorySourceTask._meta.db_table == "automemory_memory_source_tasks"

    executor = migration_executor()
    executor.migrate(BEFORE)
    Historical = historical_apps(BEFORE)
    back = Historical.get_model("controlplane", "MemorySourceTask").objects.order_by("pk")
    assert [(link.pk, link.task_id, link.merged) for link in back] == [
        (made.pk, first.pk, False),
        (joined.pk, merged.pk, True),
    ]


# The last migrations before the instruction flags and their approval left the host's memory.
BEFORE_REVIEW = [
    ("automemory", "0022_memory_source_tasks"),
    ("controlplane", "0021_memory_source_tasks_out"),
]
REVIEW = ("instruction_flags", "flagged", "approved_at", "approved_by_id")


@pytest.fixture
def before_review():
    """The database at BEFORE_REVIEW and its historical models; the latest migrations again
    afterwards."""
    executor = migration_executor()
    executor.migrate(BEFORE_REVIEW)
    yield historical_apps(BEFORE_REVIEW)
    migrate_to_latest()


def test_the_instruction_flags_and_their_approval_arrive_whole_and_go_back(before_review):
    User = before_review.get_model("auth", "User")
    Project = before_review.get_model("controlplane", "Project")
    HistoricalMemory = before_review.get_model("controlplane", "IdentityMemory")
    HistoricalState = before_review.get_model("automemory", "MemoryState")
    alice = User.objects.create(username="alice")
    project = Project.objects.create(name="webapp", created_by=alice)
    approved_at = timezone.now() - timedelta(hours=5)

    def memory(**fields):
        return HistoricalMemory.objects.create(
            scope="project", project=project, content="c", created_by=alice, **fields
        )

    values = {
        # Approved, and already with auto memory's row (its usage), which keeps its counts.
        "approved": {
            "instruction_flags": ["role_markup"],
            "flagged": True,
            "approved_at": approved_at,
            "approved_by_id": alice.pk,
        },
        "awaiting": {
            "instruction_flags": ["override_instructions", "run_command"],
            "flagged": True,
            "approved_at": None,
            "approved_by_id": None,
        },
        # Flags kept with the flag off (written by hand): stored as they were.
        "odd": {
            "instruction_flags": ["role_markup"],
            "flagged": False,
            "approved_at": None,
            "approved_by_id": None,
        },
    }
    made = {name: memory(**fields) for name, fields in values.items()}
    clean = memory()
    HistoricalState.objects.create(memory=made["approved"], injection_count=4, cite_count=1)

    migrate_to_latest()

    states = {state.memory_id: state for state in MemoryState.objects.all()}
    assert set(states) == {m.pk for m in made.values()}  # a clean memory has no row
    for name, fields in values.items():
        state = states[made[name].pk]
        assert {field: getattr(state, field) for field in REVIEW} == fields, name
    assert (
        states[made["approved"].pk].injection_count,
        states[made["approved"].pk].cite_count,
    ) == (
        4,
        1,
    )
    assert states[made["awaiting"].pk].awaiting_approval
    assert states[made["awaiting"].pk].injection_count == 0
    for name in ("instruction_flags", "flagged", "approved_at", "approved_by"):
        assert not hasattr(IdentityMemory(), name)
    # The approval needs a flag: a check in auto memory's table now.
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryState.objects.filter(pk=made["awaiting"].pk).update(
            approved_at=timezone.now(), flagged=False
        )

    executor = migration_executor()
    executor.migrate(BEFORE_REVIEW)
    apps = historical_apps(BEFORE_REVIEW)
    back = {
        m.pk: {field: getattr(m, field) for field in REVIEW}
        for m in apps.get_model("controlplane", "IdentityMemory").objects.all()
    }
    assert back == {
        **{made[name].pk: fields for name, fields in values.items()},
        clean.pk: {
            "instruction_flags": [],
            "flagged": False,
            "approved_at": None,
            "approved_by_id": None,
        },
    }
    usage = apps.get_model("automemory", "MemoryState").objects.get(memory_id=made["approved"].pk)
    assert (usage.injection_count, usage.cite_count) == (4, 1)


# The last migrations before an auto memory's goal left the host's memory.
BEFORE_GOALS = [
    ("automemory", "0024_memory_review_copied"),
    ("controlplane", "0022_memory_review_out"),
]


GOAL_FIELDS = ("goal_key", "source_finished_at", "project_id", "author_id", "visibility", "active")


@pytest.fixture
def before_goals():
    """The database at BEFORE_GOALS and its historical models; the latest migrations again
    afterwards."""
    executor = migration_executor()
    executor.migrate(BEFORE_GOALS)
    yield historical_apps(BEFORE_GOALS)
    migrate_to_latest()


def test_the_goals_arrive_whole_with_their_copies_and_go_back(before_goals):
    User = before_goals.get_model("auth", "User")
    Project = before_goals.get_model("controlplane", "Project")
    HistoricalTask = before_goals.get_model("controlplane", "Task")
    HistoricalMemory = before_goals.get_model("controlplane", "IdentityMemory")
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    project = Project.objects.create(name="webapp", created_by=alice)
    finished = timezone.now() - timedelta(days=2)

    def auto(goal: str, author, **fields):
        task = HistoricalTask.objects.create(project=project, user=author, prompt="p")
        return HistoricalMemory.objects.create(
            scope="project",
            project=project,
            content="c",
            source="auto",
            source_task=task,
            goal_key=goal,
            created_by=author,
            **fields,
        )

    active = auto("deploys", alice, source_finished_at=finished)
    older = auto("deploys", alice, status="superseded", superseded_by=active)
    held = auto("deploys", bob, visibility="author", source_finished_at=finished)
    archived = auto("builds", bob, status="archived", archived_at=finished)
    manual = HistoricalMemory.objects.create(
        scope="project", project=project, content="m", created_by=alice
    )

    migrate_to_latest()

    goals = {
        g.memory_id: tuple(getattr(g, name) for name in GOAL_FIELDS)
        for g in MemoryGoal.objects.all()
    }
    assert goals == {
        active.pk: ("deploys", finished, project.pk, alice.pk, "project", True),
        older.pk: ("deploys", None, project.pk, alice.pk, "project", False),
        held.pk: ("deploys", finished, project.pk, bob.pk, "author", True),
        archived.pk: ("builds", None, project.pk, bob.pk, "project", False),
    }  # a manual memory without a goal has no row
    for name in ("goal_key", "source_finished_at"):
        assert not hasattr(IdentityMemory(), name)
    # The migrated database keeps the rule: the older one cannot be made active again.
    with pytest.raises(IntegrityError), transaction.atomic():
        IdentityMemory.objects.filter(pk=older.pk).update(status="active")

    executor = migration_executor()
    executor.migrate(BEFORE_GOALS)
    Historical = historical_apps(BEFORE_GOALS).get_model("controlplane", "IdentityMemory")
    back = {m.pk: (m.goal_key, m.source_finished_at) for m in Historical.objects.all()}
    assert back == {
        active.pk: ("deploys", finished),
        older.pk: ("deploys", None),
        held.pk: ("deploys", finished),
        archived.pk: ("builds", None),
        manual.pk: ("", None),
    }
