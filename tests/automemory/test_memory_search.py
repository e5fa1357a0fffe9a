"""A memory's search words are auto memory's (`MemorySearch`), and so is the full-text index
over its content and keywords: triggers on the host's table and on auto memory's keep them
in step whoever writes the memory (the ORM, a queryset's update, raw SQL, a cascade), and
the host's keywords arrive whole when the migrations move them, and go back."""

import pytest
from django.core.management.sql import emit_post_migrate_signal, emit_pre_migrate_signal
from django.db import connection
from django.utils import timezone

from automemory import ranking
from automemory.models import MemoryGoal, MemorySearch
from automemory.services.search import memory_keywords, memory_keywords_set
from controlplane.models import IdentityMemory
from tests.automemory.helpers import historical_apps, migrate_to_latest, migration_executor

pytestmark = pytest.mark.django_db(transaction=True)


def found(project, text: str) -> list[int]:
    memories = ranking.memories_matching(
        text=text, scope="project", project_id=project.pk, limit=10
    )
    return sorted(m.pk for m in memories)


def test_every_memory_gets_its_row_from_the_hosts_insert(memory_factory, project):
    memory = memory_factory(project=project, content="Deploy with the rocket script.")
    assert memory_keywords(memory.pk) == []
    assert MemorySearch.objects.filter(memory_id=memory.pk).count() == 1
    assert found(project, "rocket") == [memory.pk]


def test_keywords_find_the_memory_and_follow_every_change(memory_factory, project):
    memory = memory_factory(project=project, content="Use the blue button.")
    other = memory_factory(project=project, content="Nothing to see.")
    assert found(project, "kubernetes") == []
    memory_keywords_set(memory.pk, ["kubernetes", "helm"])
    assert memory_keywords(memory.pk) == ["kubernetes", "helm"]
    assert found(project, "kubernetes") == [memory.pk]
    # The host's content changes: its old words go, the new ones and the keywords stay.
    IdentityMemory.objects.filter(pk=memory.pk).update(content="Press the red lever.")
    assert found(project, "blue") == []
    assert found(project, "lever") == [memory.pk]
    assert found(project, "helm") == [memory.pk]
    memory_keywords_set(memory.pk, ["terraform"])
    assert found(project, "kubernetes") == []
    assert found(project, "terraform") == [memory.pk]
    assert found(project, "nothing") == [other.pk]


def test_a_deleted_memory_leaves_no_row_and_no_match(memory_factory, project, alice):
    kept = memory_factory(project=project, content="Deploy on Fridays.")
    by_orm = memory_factory(project=project, content="Deploy on Mondays.", keywords=["deploy"])
    by_sql = memory_factory(project=project, content="Deploy on Sundays.", keywords=["deploy"])
    by_orm.delete()
    with connection.cursor() as cursor:  # no ORM cascade: the trigger alone removes the row
        cursor.execute("DELETE FROM identity_memories WHERE id = %s", [by_sql.pk])
    assert set(MemorySearch.objects.values_list("memory_id", flat=True)) == {kept.pk}
    assert found(project, "deploy") == [kept.pk]
    # A cascade from the host's own models (the project's deletion) takes the rest.
    project.delete()
    assert MemorySearch.objects.count() == 0


def test_search_syntax_in_keywords_and_queries_is_only_words(memory_factory, project):
    memory = memory_factory(project=project, content="Plain text.")
    memory_keywords_set(memory.pk, ['"quoted', "NEAR(a b)", "col:umn", "x*", "OR", "'); DROP"])
    assert found(project, "quoted") == [memory.pk]
    # Operators and quotes in a query are words or nothing, never search syntax.
    assert found(project, 'NEAR" OR * (column') == [memory.pk]  # "near", from a keyword
    assert found(project, '"* OR column') == []
    assert found(project, "umn") == [memory.pk]
    assert IdentityMemory.objects.filter(pk=memory.pk).exists()


def test_stored_keywords_that_are_not_a_list_read_as_none(memory_factory, project):
    memory = memory_factory(project=project, content="Plain text.")
    MemorySearch.objects.filter(memory_id=memory.pk).update(keywords={"not": "a list"})
    assert memory_keywords(memory.pk) == []
    assert memory_keywords(10**9) == []


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite table rebuilds only")
@pytest.mark.parametrize("model", [MemorySearch, MemoryGoal, IdentityMemory])
def test_a_migration_may_rebuild_any_table_the_triggers_name(
    model, memory_factory, task_factory, project, alice
):
    """What `migrate` does around a migration that alters a column on SQLite (copy the
    table, drop it, rename the copy): with a trigger naming the dropped table in place, the
    rename fails; `migrate` drops them first and puts them back after."""
    task = task_factory(project, alice, status="completed", finished_at=timezone.now())
    memory = memory_factory(
        project=project, content="Deploy with the rocket script.", keywords=["helm"],
        source="auto", source_task=task, goal_key="g" * 64,
    )  # fmt: skip
    emit_pre_migrate_signal(0, False, "default")
    with connection.schema_editor() as editor:
        editor._remake_table(model)
    emit_post_migrate_signal(0, False, "default")
    assert found(project, "helm") == found(project, "rocket") == [memory.pk]
    later = memory_factory(project=project, content="Rocket fuel is in the shed.")
    assert found(project, "rocket") == sorted([memory.pk, later.pk])
    IdentityMemory.objects.filter(pk=memory.pk).update(
        status="archived", archived_at=timezone.now()
    )
    assert MemoryGoal.objects.get(memory_id=memory.pk).active is False


# --- The migrations -------------------------------------------------------------------------

BEFORE = [("automemory", "0028_feedback_list_index"), ("controlplane", "0023_memory_goal_out")]


@pytest.fixture
def before():
    """The database before the keywords left the host, its historical models, and the latest
    migrations again afterwards."""
    migration_executor().migrate(BEFORE)
    yield historical_apps(BEFORE)
    migrate_to_latest()


def test_the_keywords_arrive_whole_are_searched_and_go_back(before):
    User = before.get_model("auth", "User")
    Project = before.get_model("controlplane", "Project")
    Memory = before.get_model("controlplane", "IdentityMemory")
    alice = User.objects.create(username="alice")
    project = Project.objects.create(name="webapp", created_by=alice)

    def memory(content: str, keywords) -> int:
        return Memory.objects.create(
            scope="project", project=project, content=content, keywords=keywords
        ).pk

    tagged = memory("Use the blue button.", ["kubernetes", "helm"])
    plain = memory("Deploy with the rocket script.", [])
    unicode = memory("Käse.", ["überall", "日本語"])

    migrate_to_latest()

    assert {s.memory_id: s.keywords for s in MemorySearch.objects.all()} == {
        tagged: ["kubernetes", "helm"],
        plain: [],
        unicode: ["überall", "日本語"],
    }
    assert not hasattr(IdentityMemory(), "keywords")
    assert found(project, "kubernetes") == [tagged]
    assert found(project, "rocket") == [plain]
    # Memories written after the move are indexed too.
    later = IdentityMemory.objects.create(scope="project", project_id=project.pk, content="helm")
    assert found(project, "helm") == sorted([tagged, later.pk])

    migration_executor().migrate(BEFORE)
    Historical = historical_apps(BEFORE).get_model("controlplane", "IdentityMemory")
    assert {m.pk: m.keywords for m in Historical.objects.all()} == {
        tagged: ["kubernetes", "helm"],
        plain: [],
        unicode: ["überall", "日本語"],
        later.pk: [],
    }
