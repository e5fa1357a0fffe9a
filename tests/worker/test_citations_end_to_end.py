"""Memories citing code, end to end through the real worker loop and the real git: a task's
agent (a shell script) changes a file of a real bare repository, the sweep writes its memory
with the citations the extraction model or the task's diff gives (checked against the
task's head commit), and later tasks receive it only while the code it cites holds, and
only on its branch until that branch is merged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from automemory.models import AutoMemoryLog, MemoryBranchScope, MemoryCitation, task_injected_ids
from automemory.services import injector
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.injector import inject_memories as real_inject_memories
from controlplane.models import IdentityMemory, MemorySource, Task, TaskStatus
from controlplane.services.repositories import repository_set
from tests.automemory.conftest import CLIENT_PY
from tests.automemory.fake_openai import FakeOpenAI, answer
from tests.git_remotes import git
from tests.worker.conftest import shell_agent

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-5-mini"
LESSON = "The retry loop of the client lives in api/client.py; keep it at two tries."


@pytest.fixture
def repo_project(project, alice, git_remote, monkeypatch, settings):
    monkeypatch.setattr(injector, "inject_memories", real_inject_memories)  # not the stub
    settings.AUTOMEMORY_CITATION_MIRROR_REFRESH_SECONDS = 0
    git_remote.commit({"api/client.py": CLIENT_PY}, "the client")
    git_remote.commit({"api/client.py": CLIENT_PY}, "feature starts", branch="feature")
    repository_set(actor=alice, project=project, url=git_remote.url, default_branch="main")
    return project


@pytest.fixture
def fake_model(settings):
    from automemory.services.model_requests import server_forms_forget

    server_forms_forget()
    server = FakeOpenAI().start()
    settings.AUTOMEMORY_OPENAI_BASE_URL = server.base_url
    settings.AUTOMEMORY_OPENAI_API_KEY = "test-key"
    settings.AUTOMEMORY_MODEL_TIMEOUT_SECONDS = 2.0
    settings.AUTOMEMORY_MODEL_MAX_RETRIES = 0
    yield server
    server.stop()


def finished_task(project, user, task_factory, worker_factory, settings, *, branch="main"):
    """A task whose agent appends a function to api/client.py and says what it learned,
    finished long enough ago for the sweep."""
    script = f"echo 'def retry(): return 2' >> api/client.py; echo '{LESSON} ' ; " + (
        "printf 'It retries twice before giving up on the server. %.0s' $(seq 12)"
    )
    task = task_factory(project, user, branch=branch, prompt="Make the client retry")
    worker_factory(shell_agent(script, settings)).run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    finished = timezone.now() - timedelta(hours=1)
    Task.objects.filter(pk=task.pk).update(
        started_at=finished - timedelta(minutes=5), finished_at=finished
    )
    task.refresh_from_db()
    return task


def test_the_deterministic_memory_cites_the_lines_the_task_wrote_in_a_file_it_names(
    repo_project, alice, task_factory, worker_factory, settings, auto_memory_on
):
    auto_memory_on(alice)
    task = finished_task(repo_project, alice, task_factory, worker_factory, settings)

    process_auto_memories(user=alice)

    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    (citation,) = MemoryCitation.objects.filter(memory=memory)
    assert citation.path == "api/client.py"
    assert citation.end_line == 81  # the appended line, its hunk's context before it
    assert citation.start_line <= 81 and citation.commit == task.head_commit
    assert not MemoryBranchScope.objects.exists()  # drawn on the default branch


def test_the_model_s_citations_are_checked_and_the_bad_ones_dropped_and_logged(
    repo_project, alice, task_factory, worker_factory, settings, auto_memory_on, fake_model
):
    auto_memory_on(alice, extract_model=MODEL)
    task = finished_task(repo_project, alice, task_factory, worker_factory, settings)
    fake_model.respond_with(
        answer(
            {
                "reason": "where the retry lives",
                "worth_remembering": True,
                "kind": "fact",
                "memory": LESSON,
                "keywords": ["retry"],
                "citations": [
                    {"path": "api/client.py", "start_line": 81, "end_line": 81},
                    {"path": "/etc/passwd", "start_line": 1, "end_line": 1},
                    {"path": "../../x", "start_line": 1, "end_line": 1},
                    {"path": "api/client.py", "start_line": 1, "end_line": 10**9},
                    {"path": "api/client.py", "start_line": -2, "end_line": 1},
                    {"path": "api/client.py", "start_line": 9, "end_line": 3},
                    {"path": "missing.py", "start_line": 1, "end_line": 1},
                ]
                + [{"path": f"../{i}", "start_line": 1, "end_line": 1} for i in range(10_000)],
            }
        )
    )

    process_auto_memories(user=alice)

    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    (kept,) = MemoryCitation.objects.filter(memory=memory)
    assert (kept.path, kept.start_line, kept.end_line) == ("api/client.py", 81, 81)
    assert kept.commit == task.head_commit
    detail = AutoMemoryLog.objects.get(task=task).detail
    assert "citations dropped" in detail
    for said in (
        "/etc/passwd",
        "../../x",
        "missing.py",
        "must not be before start_line",
        "more than 20 citations",
    ):
        assert said in detail, detail


def test_a_branch_memory_reaches_only_its_branch_until_the_branch_is_merged(
    repo_project,
    alice,
    task_factory,
    worker_factory,
    settings,
    auto_memory_on,
    api_client_for,
    git_remote,
):
    auto_memory_on(alice)
    task = finished_task(
        repo_project, alice, task_factory, worker_factory, settings, branch="feature"
    )
    process_auto_memories(user=alice)
    memory = IdentityMemory.objects.get(source=MemorySource.AUTO, source_task=task)
    assert MemoryBranchScope.objects.get(memory=memory).branch == "feature"
    client = api_client_for(alice)

    def preview(branch=None):
        params = {"prompt": "Make the client retry"}
        if branch:
            params["branch"] = branch
        return client.get(f"/projects/{repo_project.pk}/memory-preview", params).json()

    on_feature = preview("feature")
    # The task's own branch is not merged into feature yet: the lines it cites are not there.
    assert {"id": memory.pk, "scope": "project", "reason": "other_branch"} in on_feature["left_out"]
    git("fetch", "-q", "origin", f"controlplane/task-{task.pk}", cwd=git_remote.work)
    git("push", "-q", "origin", "FETCH_HEAD:refs/heads/feature", cwd=git_remote.work)
    on_feature = preview("feature")
    assert memory.pk in on_feature["memory_ids"], on_feature
    (shown,) = [m for m in on_feature["memories"] if m["id"] == memory.pk]
    assert shown["citations"][0]["path"] == "api/client.py"
    on_main = preview()
    assert {"id": memory.pk, "scope": "project", "reason": "other_branch"} in on_main["left_out"]
    # A task on the default branch does not receive it.
    main_task = task_factory(repo_project, alice, branch="main", prompt="Anything")
    worker_factory(shell_agent("true", settings)).run_once()
    main_task.refresh_from_db()
    assert memory.pk not in task_injected_ids(main_task)

    # feature merged into main: project-wide from now on.
    git("push", "-q", "origin", "FETCH_HEAD:refs/heads/main", cwd=git_remote.work)
    merged = preview()
    assert memory.pk in merged["memory_ids"], merged
    assert MemoryBranchScope.objects.get(memory=memory).merged_at is not None
    later = task_factory(repo_project, alice, branch="main", prompt="Anything else")
    worker_factory(shell_agent("true", settings)).run_once()
    later.refresh_from_db()
    assert memory.pk in task_injected_ids(later)
