"""Tasks on a project with a repository, through the real worker loop and the real `git`:
a bare repository over file:// on this machine, the `command` executor as the agent (a
shell script that reads and changes files in its worktree)."""

from __future__ import annotations

import shlex

import pytest
from django.conf import settings

from controlplane.models import TaskDiff, TaskStatus
from controlplane.services.repositories import repository_set
from tests.git_remotes import bare_remote, git
from worker.executors.command import CommandExecutor
from worker.models import TaskBranch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def remote(tmp_path, settings):
    settings.REPOSITORY_FILE_ROOTS = [str(tmp_path / "remotes")]
    settings.WORKER_REPO_CACHE = str(tmp_path / "cache")
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    (tmp_path / "remotes").mkdir()
    return bare_remote(
        tmp_path / "remotes",
        {"README.md": "# Demo\n\nHello.\n", "src/app.py": "print('hello')\n"},
    )


def agent(script: str, settings) -> CommandExecutor:
    settings.WORKER_COMMAND = f"sh -c {shlex.quote(script)}"
    return CommandExecutor()


def test_a_turn_runs_in_a_worktree_and_its_change_is_committed_diffed_and_pushed(
    remote, project, alice, task_factory, worker_factory, settings
):
    repository_set(actor=alice, project=project, url=remote.url, default_branch="main")
    base = remote.head()
    task = task_factory(project, alice, branch="main")
    script = "cat README.md; git status --short; echo 'print(42)' >> src/app.py; echo new > notes.txt"

    worker_factory(agent(script, settings)).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert "# Demo" in task.result_text
    assert task.base_commit == base
    assert task.head_commit and task.head_commit != base
    assert task.changed_files == [
        {"path": "notes.txt", "status": "added"},
        {"path": "src/app.py", "status": "modified"},
    ]
    diff = TaskDiff.objects.get(task=task)
    assert "+print(42)" in diff.diff and "+new" in diff.diff
    assert not diff.truncated
    # pushed to the remote as the task's own branch
    assert remote.head(f"controlplane/task-{task.pk}") == task.head_commit
    assert TaskBranch.objects.get(task=task).storage == "remote"
    assert remote.show(task.head_commit, "notes.txt") == "new"
