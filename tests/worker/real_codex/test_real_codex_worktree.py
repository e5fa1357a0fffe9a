"""The real `codex` CLI in a task's worktree: the model has codex read a file of the
repository and apply a patch to it; turn 2 runs on another host (another CODEX_HOME, another
WORKER_REPO_CACHE and task root) and sees turn 1's change; the diff endpoint shows it.
The repository is a real bare repository over file://; the task's branch travels by push,
or as a bundle in the database when pushing is off."""

from __future__ import annotations

import json
import shutil

import pytest

from controlplane.models import TaskStatus
from controlplane.services.repositories import repository_set
from tests.git_remotes import bare_remote
from tests.worker.real_codex.responses_server import Reply, message
from tests.worker.real_codex.test_real_codex import continue_task
from tests.worker.real_codex.test_real_codex_isolation import output_of, shell_call
from worker.codex import CodexExecutor
from worker.models import TaskBranch

pytestmark = pytest.mark.django_db(transaction=True)

PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: src/greeting.py
@@
-GREETING = "Hello"
+GREETING = "Hello, patched"
*** End Patch
EOF"""


@pytest.fixture
def hosts(codex_setup, tmp_path, monkeypatch, settings):
    """`hosts.use(name)`: that host's own CODEX_HOME, task root and repository cache."""

    def use(name: str) -> None:
        folder = tmp_path / f"host-{name}"
        if not folder.exists():
            (folder / "codex").mkdir(parents=True)
            shutil.copy(codex_setup.home / "config.toml", folder / "codex" / "config.toml")
        monkeypatch.setenv("CODEX_HOME", str(folder / "codex"))
        settings.WORKER_TASK_ROOT = str(folder / "tasks")
        settings.WORKER_REPO_CACHE = str(folder / "repo-cache")

    return use


@pytest.mark.parametrize("push", [True, False], ids=["pushed", "bundled"])
def test_codex_patches_the_worktree_and_turn_2_on_another_host_sees_it(
    codex_setup,
    hosts,
    project,
    alice,
    task_factory,
    worker_factory,
    settings,
    tmp_path,
    api_client_for,
    push,
):
    settings.REPOSITORY_FILE_ROOTS = [str(tmp_path / "remotes")]
    settings.WORKER_CODEX_SANDBOX = "workspace-write"
    settings.WORKER_TASK_BRANCH_PUSH = push
    (tmp_path / "remotes").mkdir()
    remote = bare_remote(
        tmp_path / "remotes",
        {"README.md": "# Greeter\n", "src/greeting.py": 'GREETING = "Hello"\n'},
    )
    repository_set(actor=alice, project=project, url=remote.url, default_branch="main")
    codex_setup.server.script(
        Reply(items=(shell_call("cat src/greeting.py", "read"),)),
        Reply(items=(shell_call(PATCH, "patch"),)),
        Reply(items=(message("Patched the greeting."),)),
        Reply(items=(shell_call("cat src/greeting.py; git diff --stat main", "again"),)),
        Reply(items=(message("It says Hello, patched."),)),
    )
    task = task_factory(project, alice, prompt="Make the greeting say patched", branch="main")

    hosts("a")
    worker_factory(CodexExecutor(), worker_id="worker-a").run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    requests = codex_setup.server.model_requests()
    assert 'GREETING = "Hello"' in output_of(requests[1], "read")
    assert "Updated the following files" in output_of(requests[2], "patch")
    assert task.base_commit == remote.head()
    assert task.changed_files == [{"path": "src/greeting.py", "status": "modified"}]
    turn_1_head = task.head_commit
    assert TaskBranch.objects.get(task=task).storage == ("remote" if push else "database")
    assert (f"controlplane/task-{task.pk}" in remote.branches()) is push

    hosts("b")
    continue_task(task, "What does the greeting say now?")
    worker_factory(CodexExecutor(), worker_id="worker-b").run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    seen = output_of(codex_setup.server.model_requests()[4], "again")
    assert 'GREETING = "Hello, patched"' in seen
    assert "src/greeting.py | 2 +-" in seen  # the agent's own git sees the task's change
    # turn 2 changed nothing: nothing new stored, the head stays turn 1's
    assert task.head_commit == turn_1_head
    assert TaskBranch.objects.get(task=task).turn == 1

    response = api_client_for(alice).get(f"/tasks/{task.pk}/diff")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/x-diff")
    body = response.content.decode()
    assert '-GREETING = "Hello"' in body and '+GREETING = "Hello, patched"' in body
    detail = api_client_for(alice).get(f"/tasks/{task.pk}").json()
    assert detail["branch"] == "main" and detail["head_commit"] == turn_1_head
    # every request of both turns ran with the worktree as the agent's folder, in git
    texts = json.dumps([r.body.get("input") for r in codex_setup.server.model_requests()])
    assert "skip-git-repo-check" not in texts
