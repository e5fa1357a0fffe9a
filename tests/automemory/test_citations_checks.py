"""Memories citing code are checked against the commit a task starts from before injection:
fresh, moved (the line numbers follow), changed and deleted (left out), a force-pushed
default branch, paths with spaces and non-ASCII letters; what it costs in git processes and
statements."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automemory.models import MemoryCitation
from automemory.services.citations.gate import CodeView
from controlplane.models import IdentityMemory
from tests.automemory.citation_helpers import GitCalls, cited_memory, code_view, injected
from tests.automemory.conftest import CLIENT_PY

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _always_fetch(settings):
    settings.AUTOMEMORY_CITATION_MIRROR_REFRESH_SECONDS = 0


@pytest.fixture
def task(task_factory, code_project, alice, auto_memory_on):
    auto_memory_on(alice)
    return task_factory(code_project, alice, prompt="Fix the client", branch="main")


def test_a_fresh_citation_is_injected_with_its_lines(task, code_project, alice, code_remote):
    memory = cited_memory(
        code_project, alice, "The client retries twice.", ("api/client.py", 40, 60)
    )
    code_remote.commit({"README.md": "other file changed\n"})

    prompt = injected(task, code_view(code_project, code_remote))

    assert f"#{memory.pk} The client retries twice.\n  Cites: api/client.py:40-60\n" in prompt
    assert MemoryCitation.objects.get().state == "fresh"


def test_moved_lines_are_followed_and_injected_at_their_new_numbers(
    task, code_project, alice, code_remote
):
    cited_memory(code_project, alice, "step_20 returns 20.", ("api/client.py", 39, 40))
    code_remote.commit({"api/client.py": "# header\n" * 5 + CLIENT_PY})

    prompt = injected(task, code_view(code_project, code_remote))

    assert "Cites: api/client.py:44-45" in prompt
    stored = MemoryCitation.objects.get()
    assert (stored.state, stored.start_line, stored.end_line) == ("moved", 44, 45)
    assert stored.commit == code_remote.head()


def test_changed_lines_leave_the_memory_out_and_the_preview_says_stale_code(
    task, code_project, alice, code_remote, api_client_for
):
    memory = cited_memory(code_project, alice, "step_20 returns 20.", ("api/client.py", 39, 40))
    code_remote.commit({"api/client.py": CLIENT_PY.replace("return 20", "return 21")})

    prompt = injected(task, code_view(code_project, code_remote))

    assert f"#{memory.pk}" not in prompt
    assert MemoryCitation.objects.get().state == "changed"
    body = (
        api_client_for(alice)
        .get(f"/projects/{code_project.pk}/memory-preview", {"prompt": "Fix the client"})
        .json()
    )
    assert {"id": memory.pk, "scope": "project", "reason": "stale_code"} in body["left_out"]
    assert memory.pk not in body["memory_ids"]


def test_a_deleted_file_leaves_the_memory_out(task, code_project, alice, code_remote):
    memory = cited_memory(
        code_project, alice, "Deploys need a tag.", ("docs/how to deploy.md", 3, 4)
    )
    code_remote.commit({"docs/how to deploy.md": None})

    prompt = injected(task, code_view(code_project, code_remote))

    assert f"#{memory.pk}" not in prompt
    assert MemoryCitation.objects.get().state == "deleted"


def test_non_ascii_paths_are_checked_like_any(task, code_project, alice, code_remote):
    memory = cited_memory(code_project, alice, "VALUE is e acute.", ("src/café/naïve.py", 1, 1))
    code_remote.commit({"src/café/naïve.py": "# moved\nVALUE = 'é'\nOTHER = 2\n"})

    prompt = injected(task, code_view(code_project, code_remote))

    assert f"#{memory.pk} VALUE is e acute.\n  Cites: src/café/naïve.py:2-2" in prompt


def test_a_force_pushed_default_branch_is_checked_by_content(
    task, code_project, alice, code_remote
):
    kept = cited_memory(code_project, alice, "step_1 returns 1.", ("api/client.py", 1, 2))
    lost = cited_memory(code_project, alice, "Deploys need a tag.", ("docs/how to deploy.md", 4, 4))
    old = MemoryCitation.objects.get(memory=kept).commit
    code_remote.force_push_new_history({"api/client.py": CLIENT_PY})

    prompt = injected(task, code_view(code_project, code_remote))

    assert old != code_remote.head()
    assert f"#{kept.pk} step_1 returns 1.\n  Cites: api/client.py:1-2" in prompt
    assert f"#{lost.pk}" not in prompt
    assert MemoryCitation.objects.get(memory=lost).state == "deleted"


def test_an_unreadable_repository_leaves_citations_unchecked_and_says_so(
    task, code_project, alice, code_remote, tmp_path
):
    memory = cited_memory(code_project, alice, "step_1 returns 1.", ("api/client.py", 1, 2))
    code_remote.commit({"README.md": "changed\n"})
    gone = CodeView(tmp_path / "no-such-mirror.git", code_remote.head(), "main", "main")

    prompt = injected(task, gone)

    assert f"#{memory.pk} step_1 returns 1.\n  Cites: api/client.py:1-2 (not checked" in prompt
    assert MemoryCitation.objects.get().state == "fresh"  # what the last check found stays


def _moved_injection(task, project, remote, settings, tmp_path, header: str):
    """A commit moving every cited line, then one injection: its statements and git runs."""
    remote.commit({"api/client.py": header + CLIENT_PY, "README.md": header})
    view = code_view(project, remote)
    counting = GitCalls(tmp_path)
    settings.WORKER_GIT_BINARY = str(counting.binary)
    with CaptureQueriesContext(connection) as queries:
        prompt = injected(task, view)
    settings.WORKER_GIT_BINARY = "git"
    return len(queries), counting, prompt, view


def test_an_injection_runs_at_most_two_git_processes_and_its_statements_stay_flat(
    task, code_project, alice, code_remote, settings, tmp_path
):
    for i in range(1, 8):
        cited_memory(code_project, alice, f"Uncited fact {i}.")
    cited_memory(code_project, alice, "step_1 returns 1.", ("api/client.py", 1, 2))
    one, _, _, _ = _moved_injection(
        task, code_project, code_remote, settings, tmp_path / "one", "# a\n"
    )
    for i in range(1, 8):
        cited_memory(
            code_project,
            alice,
            f"step_{i + 1} returns {i + 1}.",
            ("api/client.py", 2 * i + 1, 2 * i + 2),
            ("docs/how to deploy.md", 3, 3),
        )
    IdentityMemory.objects.filter(content__startswith="Uncited").delete()

    many, counting, prompt, view = _moved_injection(
        task, code_project, code_remote, settings, tmp_path / "many", "# a\n# b\n"
    )

    assert many == one, (one, many)  # 5 cited memories injected cost what 1 did
    calls = counting.calls()
    assert len(calls) <= 2, calls
    assert any("diff --name-only" in call for call in calls)
    assert any("cat-file --batch" in call for call in calls)
    assert prompt.count("Cites: api/client.py:") == 5  # the project's injection limit
    # The same base again: the diff is cached and what was found is saved: no git at all.
    counting.reset()
    settings.WORKER_GIT_BINARY = str(counting.binary)
    injected(task, view)
    assert counting.calls() == []


def test_memory_search_shows_checked_citations_and_leaves_stale_memories_out(
    code_project, alice, code_remote, task_factory, auto_memory_on
):
    from automemory.services.task_keys import task_key_new
    from controlplane.models import TaskStatus
    from tests.automemory.test_memory_tools import ok

    auto_memory_on(alice, injection_ranking="relevant")
    moved = cited_memory(code_project, alice, "Deploys retry step one.", ("api/client.py", 1, 2))
    changed = cited_memory(code_project, alice, "Deploys use step 20.", ("api/client.py", 39, 40))
    plain = cited_memory(code_project, alice, "Deploys need a tag.")
    head = code_remote.commit(
        {"api/client.py": "# header\n" + CLIENT_PY.replace("return 20", "return 21")}
    )
    minted = task_key_new()
    task_factory(
        code_project,
        alice,
        status=TaskStatus.RUNNING,
        memory_key_hash=minted.key_hash,
        branch="main",
        base_commit=head,
    )

    found = ok(minted.key, "memory_search", query="deploys", limit=5)["memories"]

    by_id = {m["id"]: m for m in found}
    assert changed.pk not in by_id
    assert by_id[moved.pk]["citations"] == [
        {"path": "api/client.py", "start_line": 2, "end_line": 3, "commit": head, "state": "moved"}
    ]
    assert "citations" not in by_id[plain.pk]


def test_the_preview_with_an_unreachable_repository_shows_citations_unchecked(
    code_project, alice, code_remote, api_client_for, auto_memory_on
):
    import shutil

    from controlplane.models import Repository
    from controlplane.services.mirrors import mirror_path

    auto_memory_on(alice)
    memory = cited_memory(code_project, alice, "step_1 returns 1.", ("api/client.py", 1, 2))
    shutil.rmtree(mirror_path(Repository.objects.get(project=code_project)))
    shutil.rmtree(code_remote.path)  # the remote is gone too: nothing can be fetched

    body = (
        api_client_for(alice)
        .get(f"/projects/{code_project.pk}/memory-preview", {"prompt": "Fix the client"})
        .json()
    )

    assert memory.pk in body["memory_ids"]
    assert "Cites: api/client.py:1-2 (not checked against the code)" in body["block"]
    (shown,) = [m for m in body["memories"] if m["id"] == memory.pk]
    assert shown["citations"][0]["state"] == "unchecked"
    assert MemoryCitation.objects.get().state == "fresh"  # the last real check stands


def test_a_preview_of_memories_citing_nothing_reads_no_git(
    code_project, alice, memory_factory, api_client_for, auto_memory_on, settings, tmp_path
):
    auto_memory_on(alice)
    memory_factory(project=code_project, content="Deploys need a tag.")
    counting = GitCalls(tmp_path)
    settings.WORKER_GIT_BINARY = str(counting.binary)

    body = (
        api_client_for(alice)
        .get(f"/projects/{code_project.pk}/memory-preview", {"prompt": "Deploy"})
        .json()
    )

    assert body["memory_ids"]
    assert counting.calls() == []
