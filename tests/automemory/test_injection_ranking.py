"""`injection_ranking`: `recent` (newest first) and `relevant` (the database's full-text search).

Runs on SQLite (FTS5, BM25) and, with DATABASE_URL, on PostgreSQL (tsvector, GIN, ts_rank_cd).
"""

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from automemory import ranking
from automemory.models import task_injected_ids
from automemory.services.injector import inject_memories
from automemory.services.search import memory_keywords_set, query_terms
from controlplane.models import AuditEvent, IdentityMemory, MemorySource, MemoryStatus, Task
from tests.conftest import memory_stored, memory_usage_of

TRANSACTION_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)
DEPLOY = "Deploys go through the release pipeline: tag the commit, then ship it with make release."

FILLER = [
    "The login page uses the session cookie named sid.",
    "Database migrations are generated with makemigrations and reviewed by hand.",
    "The billing module rounds amounts to cents with banker's rounding.",
    "Frontend styles live in static/css and are built with the asset pipeline.",
    "Error reports are sent to the on-call channel by the alerting service.",
    "The search page paginates results twenty per page.",
    "Background jobs run in the queue consumer, one per worker process.",
]


def memory(*, project=None, user=None, content="remember this", **fields):
    scope = "project" if project is not None else "user"
    return memory_stored(
        scope=scope,
        project=project,
        user=user if scope == "user" else None,
        content=content,
        **fields,
    )


def aged(days_ago: int, **kwargs) -> IdentityMemory:
    with freeze_time(timezone.now() - timedelta(days=days_ago)):
        return memory(**kwargs)


def run(task):
    return inject_memories(task=task, prompt=task.prompt, goal=task.goal, actor_label="worker:t")


@pytest.fixture
def relevant(alice, auto_memory_on):
    return auto_memory_on(alice, injection_ranking="relevant")


@pytest.fixture
def old_deploy_memory(project):
    """The deploy memory, older than a project's worth of newer memories on other topics."""
    deploy = aged(90, project=project, content=DEPLOY)
    for days, text in enumerate(FILLER):
        aged(days + 1, project=project, content=text)
    return deploy


def test_relevant_finds_the_old_deploy_memory(
    task_factory, project, alice, relevant, old_deploy_memory
):
    task = task_factory(project, alice, prompt="How do we deploy a release to production?")
    result = run(task)
    assert old_deploy_memory.pk in result.memory_ids
    assert result.memory_ids[0] == old_deploy_memory.pk  # best match first
    assert DEPLOY in result.prompt


def test_recent_misses_the_old_deploy_memory(
    task_factory, project, alice, auto_memory_on, old_deploy_memory
):
    auto_memory_on(alice, injection_ranking="recent")
    task = task_factory(project, alice, prompt="How do we deploy a release to production?")
    result = run(task)
    assert old_deploy_memory.pk not in result.memory_ids
    newest_five = list(
        IdentityMemory.objects.filter(project=project).order_by("-created_at", "-id")[:5]
    )
    assert result.memory_ids == [m.pk for m in newest_five]


def test_recent_is_the_default(task_factory, project, alice, auto_memory_on, old_deploy_memory):
    auto_memory_on(alice)
    task = task_factory(project, alice, prompt="deploy release")
    assert old_deploy_memory.pk not in run(task).memory_ids


def test_stemming_matches_other_word_forms(task_factory, project, alice, relevant):
    deployed = aged(50, project=project, content="We deployed the releases on Fridays.")
    for days, text in enumerate(FILLER):
        aged(days, project=project, content=text)
    task = task_factory(project, alice, prompt="deploying a release")
    assert run(task).memory_ids[0] == deployed.pk


def test_keywords_are_searched_too(task_factory, project, alice, relevant):
    tagged = aged(60, project=project, content="Use the blue button.")
    memory_keywords_set(tagged.pk, ["kubernetes"])
    for days, text in enumerate(FILLER):
        aged(days, project=project, content=text)
    task = task_factory(project, alice, prompt="kubernetes cluster is down")
    assert run(task).memory_ids[0] == tagged.pk


def test_recent_memories_fill_the_free_slots(task_factory, project, alice, relevant):
    deploy = aged(90, project=project, content=DEPLOY)
    others = [aged(days + 1, project=project, content=text) for days, text in enumerate(FILLER)]
    task = task_factory(project, alice, prompt="deploy it")
    ids = run(task).memory_ids
    # The one match, then the four newest of the rest, newest first.
    assert ids == [deploy.pk] + [m.pk for m in others[:4]]


def test_recency_breaks_ties(task_factory, project, alice, relevant):
    older = aged(30, project=project, content="Deploys happen on Tuesdays.")
    newer = aged(2, project=project, content="Deploys happen on Tuesdays.")
    task = task_factory(project, alice, prompt="deploys")
    assert run(task).memory_ids[:2] == [newer.pk, older.pk]


def test_a_better_match_outranks_a_newer_weaker_one(task_factory, project, alice, relevant):
    strong = aged(40, project=project, content="Rotate the signing key: rotate key, sign, verify.")
    weak = aged(1, project=project, content="The key of the settings dict is lowercase.")
    task = task_factory(project, alice, prompt="how to rotate the signing key")
    ids = run(task).memory_ids
    assert ids.index(strong.pk) < ids.index(weak.pk)


def test_scopes_are_ranked_and_counted_apart(task_factory, project, alice, relevant):
    for i in range(7):
        aged(i + 1, user=alice, content=f"Alice deploy note {i}")
        aged(i + 1, project=project, content=f"Project deploy note {i}")
    task = task_factory(project, alice, prompt="deploy")
    result = run(task)
    stored = {m.pk: m for m in IdentityMemory.objects.filter(pk__in=result.memory_ids)}
    assert [stored[pk].scope for pk in result.memory_ids] == ["user"] * 5 + ["project"] * 5
    event = AuditEvent.objects.get(action="worker_memory_injected")
    assert len(event.data["user_memory_ids"]) == 5
    assert len(event.data["project_memory_ids"]) == 5


def test_other_users_and_projects_are_never_searched(
    task_factory, project, project_factory, alice, bob, relevant
):
    elsewhere = project_factory(bob, "elsewhere")
    theirs = memory(project=elsewhere, content=DEPLOY)
    bobs = memory(user=bob, content=DEPLOY)
    mine = memory(project=project, content="Nothing about that.")
    task = task_factory(project, alice, prompt="deploy release")
    ids = run(task).memory_ids
    assert ids == [mine.pk]
    assert theirs.pk not in ids and bobs.pk not in ids


@pytest.mark.parametrize("ranking", ["recent", "relevant"])
def test_superseded_archived_and_unapproved_memories_are_not_injected(
    task_factory, project, alice, auto_memory_on, ranking
):
    auto_memory_on(alice, injection_ranking=ranking)
    source = task_factory(project, alice, prompt="source")
    active = memory(project=project, content=DEPLOY)
    memory(project=project, content=DEPLOY, status=MemoryStatus.SUPERSEDED)
    memory(project=project, content=DEPLOY, status="archived", archived_at=timezone.now())
    awaiting = memory(
        project=project,
        content=DEPLOY,
        source=MemorySource.AUTO,
        source_task=source,
        goal_key="g1",
        flagged=True,
        instruction_flags=["imperative"],
    )
    other_source = task_factory(project, alice, prompt="other")
    approved = memory(
        project=project,
        content=DEPLOY,
        source=MemorySource.AUTO,
        source_task=other_source,
        goal_key="g2",
        flagged=True,
        approved_at=timezone.now(),
    )
    flagged_manual = memory(project=project, content=DEPLOY, flagged=True)
    task = task_factory(project, alice, prompt="deploy release")
    ids = run(task).memory_ids
    # A flagged memory is held whoever wrote it, until approved.
    assert sorted(ids) == sorted([active.pk, approved.pk])
    assert flagged_manual.pk not in ids
    assert awaiting.pk not in ids


def test_the_index_follows_edits_and_deletes(task_factory, project, alice, relevant):
    edited = memory(project=project, content="Something about colours.")
    deleted = memory(project=project, content="Deploy with the rocket script.")
    for text in FILLER[:5]:
        memory(project=project, content=text)

    IdentityMemory.objects.filter(pk=edited.pk).update(content="Deploy with the boat script.")
    deleted.delete()
    assert ranking.memories_matching(
        text="rocket deploy", scope="project", project_id=project.pk, limit=5
    ) == [edited]
    assert (
        ranking.memories_matching(text="colours", scope="project", project_id=project.pk, limit=5)
        == []
    )
    edited.refresh_from_db()
    edited.content = "Now about the harbour."
    edited.save()
    assert ranking.memories_matching(
        text="harbour", scope="project", project_id=project.pk, limit=5
    ) == [edited]
    assert (
        ranking.memories_matching(text="boat", scope="project", project_id=project.pk, limit=5)
        == []
    )


def test_a_superseded_memory_leaves_the_search(project):
    old = memory(project=project, content=DEPLOY)
    assert ranking.memories_matching(
        text="deploy", scope="project", project_id=project.pk, limit=5
    ) == [old]
    newer = memory(project=project, content=DEPLOY + " Also tag the image.")
    IdentityMemory.objects.filter(pk=old.pk).update(
        status=MemoryStatus.SUPERSEDED, superseded_by=newer
    )
    assert ranking.memories_matching(
        text="deploy", scope="project", project_id=project.pk, limit=5
    ) == [newer]


def test_memories_matching_filters_and_excludes(project, alice, bob):
    a = memory(project=project, content="Deploy on Mondays.")
    b = memory(project=project, content="Deploy on Mondays and Tuesdays, deploy again.")
    mine = memory(user=alice, content="I deploy from my laptop.")
    memory(user=bob, content="I deploy from my desktop.")
    found = ranking.memories_matching(
        text="deploy", scope="project", project_id=project.pk, limit=5
    )
    assert {m.pk for m in found} == {a.pk, b.pk}
    assert all(isinstance(m.match_score, float) for m in found)
    assert ranking.memories_matching(
        text="deploy", scope="project", project_id=project.pk, limit=5, exclude_ids=[b.pk]
    ) == [a]
    assert ranking.memories_matching(text="deploy", scope="user", user_id=alice.pk, limit=5) == [
        mine
    ]
    assert len(ranking.memories_matching(text="deploy", scope="project", limit=1)) == 1
    assert ranking.memories_matching(text="the and of", scope="project", limit=5) == []


ADVERSARIAL_PROMPTS = [
    'deploy" OR "x',
    "deploy AND NOT release",
    "NEAR(deploy release, 2)",
    "deploy*",
    "^deploy",
    "content:deploy",
    "keywords : deploy",
    "(deploy",
    "deploy)",
    '"""',
    "'; DROP TABLE identity_memories; --",
    "deploy & release | !ship <-> prod :* ",
    "-deploy +release ~ship",
    "\uff24\uff25\uff30\uff2c\uff2f\uff39 d\u00e9ploiement \u90e8\u7f72 \U0001f680 deploy",
    "\x00deploy\x00",
    "deploy " * 5000,
    " ".join(f"word{i}" for i in range(2000)) + " deploy",
    "",
    "   \n\t ",
    "a" * 100_000,
]


@pytest.mark.parametrize("prompt", ADVERSARIAL_PROMPTS, ids=range(len(ADVERSARIAL_PROMPTS)))
def test_adversarial_prompts_never_break_the_search(task_factory, project, alice, relevant, prompt):
    deploy = memory(project=project, content=DEPLOY)
    task = task_factory(project, alice, prompt="placeholder")
    result = inject_memories(task=task, prompt=prompt, goal=None)
    # Injection went through (the only memory fills the free slot even without a match).
    assert result.memory_ids == [deploy.pk]
    assert task_injected_ids(Task.objects.get(pk=task.pk)) == [deploy.pk]
    found = ranking.memories_matching(text=prompt, scope="project", project_id=project.pk, limit=5)
    assert found in ([], [deploy])


def test_query_terms_are_capped_and_clean():
    terms = query_terms(" ".join(f"w{i}" for i in range(500)) + ' "quoted" NEAR(x) the a')
    assert len(terms) == 32
    assert all(term.isalnum() for term in terms)
    assert query_terms('deploy" OR "xy the and NEAR') == ["deploy", "xy", "near"]
    assert query_terms("The DEPLOY, deploy; Deploy!") == ["deploy"]
    assert query_terms("the of and a") == []
    assert query_terms("snake_case_name") == ["snake", "case", "name"]


def test_the_goal_is_searched_too(task_factory, project, alice, relevant, old_deploy_memory):
    task = task_factory(project, alice, prompt="do it", goal="Ship the release to production")
    assert run(task).memory_ids[0] == old_deploy_memory.pk


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ranking", ["recent", "relevant"])
def test_one_injection_takes_at_most_six_queries(
    task_factory, project, alice, auto_memory_on, ranking
):
    auto_memory_on(alice, injection_ranking=ranking)
    for i in range(12):
        memory(user=alice, content=f"Alice note {i} about deploys")
        memory(project=project, content=f"Project note {i} about releases")
    task = task_factory(project, alice, prompt="deploy the release")
    with CaptureQueriesContext(connection) as queries:
        result = run(task)
    assert len(result.memory_ids) == 10
    statements = [q["sql"] for q in queries.captured_queries]
    # Transaction control (SQLite's BEGIN IMMEDIATE / COMMIT) is not a query.
    data = [sql for sql in statements if not TRANSACTION_CONTROL.match(sql)]
    assert len(data) <= 6, "\n".join(sql[:120] for sql in data)
    assert len(statements) - len(data) <= 2


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite table rebuilds only")
@pytest.mark.django_db(transaction=True)
def test_the_search_survives_a_sqlite_table_rebuild(project):
    before = memory(project=project, content="Deploy with the rocket script.")
    # What Django does to alter some columns on SQLite: copy to a new table, drop the old
    # one (and its triggers with it), rename.
    with connection.schema_editor() as editor:
        editor._remake_table(IdentityMemory)
    call_command("migrate", verbosity=0)  # post_migrate puts the triggers back
    after = memory(project=project, content="Deploy with the boat script.")
    found = ranking.memories_matching(
        text="deploy", scope="project", project_id=project.pk, limit=5
    )
    assert {m.pk for m in found} == {before.pk, after.pk}
    IdentityMemory.objects.filter(pk=after.pk).update(content="Now about the harbour.")
    assert (
        ranking.memories_matching(text="boat", scope="project", project_id=project.pk, limit=5)
        == []
    )


@pytest.mark.django_db(transaction=True)
def test_over_http_and_the_worker_a_deploy_task_gets_the_old_deploy_memory(
    api_client_for, alice, project
):
    client = api_client_for(alice)
    settings = {"use_memories": True, "injection_ranking": "relevant", "injection_max_chars": 800}
    response = client.patch("/users/me/auto-memory-settings", settings, format="json")
    assert response.status_code == 200, response.content
    memories = f"/projects/{project.pk}/memories"
    with freeze_time(timezone.now() - timedelta(days=120)):
        deploy = client.post(memories, {"content": DEPLOY}, format="json").json()
    for days, text in enumerate(FILLER):
        with freeze_time(timezone.now() - timedelta(days=days + 1)):
            assert client.post(memories, {"content": text}, format="json").status_code == 201
    created = client.post(
        f"/projects/{project.pk}/tasks",
        {"prompt": "Ship the hotfix: deploy it to production"},
        format="json",
    ).json()

    call_command("run_worker", "--once", "--executor", "echo", "--worker-id", "rank")

    detail = client.get(f"/tasks/{created['id']}").json()
    assert detail["status"] == "completed"
    assert detail["injected_memory_ids"][0] == deploy["id"]
    assert DEPLOY in detail["result_text"]  # the echo executor returns what it was given
    block = detail["result_text"].split("\n\nShip the hotfix")[0]
    assert len(block) <= 800
    event = AuditEvent.objects.get(action="worker_memory_injected")
    assert event.data["memory_ids"] == detail["injected_memory_ids"]
    assert set(event.data["left_out_for_budget"]).isdisjoint(detail["injected_memory_ids"])
    stored = IdentityMemory.objects.get(pk=deploy["id"])
    assert (
        memory_usage_of(stored).injection_count == 1
        and memory_usage_of(stored).last_injected_at is not None
    )
