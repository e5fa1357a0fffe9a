"""A worker killed mid-turn on a task with a repository: real `manage.py run_worker`
processes sharing one repository cache (one host), the real `git`, a bare repository over
file://. The next worker to start removes the dead turn's worktree, and the turn, recovered
as a resume, runs again from the last stored state."""

from __future__ import annotations

import shlex
import signal

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from controlplane.models import Membership, Project, Repository, Role, Task, TaskStatus
from tests.git_remotes import bare_remote
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_killed_mid_turn_leaves_nothing_and_the_turn_runs_again_from_its_base(
    shared_db, worker_processes, tmp_path
):
    (tmp_path / "remotes").mkdir()
    remote = bare_remote(tmp_path / "remotes", {"README.md": "# Demo\n"})
    runs = tmp_path / "runs"
    runs.mkdir()
    db = shared_db.alias
    user = get_user_model().objects.db_manager(db).create_user(username="killer-alice")
    project = Project.objects.using(db).create(name="killed", created_by=user)
    Membership.objects.using(db).create(project=project, user=user, role=Role.OWNER)
    Repository.objects.using(db).create(project=project, url=remote.url, default_branch="main")
    task = Task.objects.using(db).create(
        project=project, user=user, prompt="go", branch="main", queued_at=timezone.now()
    )
    # The first run leaves a file behind and hangs; any run that finds that file says so.
    script = (
        "test -e partial.txt && echo DIRTY; echo half > partial.txt; "
        f"if [ ! -e {runs}/first ]; then touch {runs}/first; sleep 60; fi; "
        "echo finished > done.txt; echo clean"
    )
    env = {
        "WORKER_COMMAND": f"sh -c {shlex.quote(script)}",
        "WORKER_SANDBOX_WRITABLE": str(runs),
        "REPOSITORY_FILE_ROOTS": str(tmp_path / "remotes"),
        "WORKER_REPO_CACHE": str(tmp_path / "cache"),
        "WORKER_TASK_ROOT": str(tmp_path / "tasks"),
        "WORKER_STALE_AFTER_SECONDS": "3",
        "WORKER_HEARTBEAT_SECONDS": "1",
    }
    args = ("--executor", "command", "--poll-interval", "0.05")
    doomed = worker_processes.start(shared_db, *args, "--worker-id", "doomed", env=env)
    wait_for(
        lambda: (runs / "first").exists(),
        timeout=30,
        message=f"the first run never started:\n{worker_processes.logs()}",
    )
    worktree = tmp_path / "tasks" / f"task-{task.pk}" / "work"
    assert (worktree / "partial.txt").read_text() == "half\n"
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    assert (worktree / "partial.txt").exists()  # what the killed turn left

    second = worker_processes.start(shared_db, *args, "--worker-id", "second", env=env)
    done = wait_for(
        lambda: shared_db.tasks().filter(pk=task.pk, status=TaskStatus.COMPLETED).first(),
        timeout=60,
        message=f"the task never ran again:\n{worker_processes.logs()}",
    )
    log = worker_processes.log(second)
    assert f"task {task.pk}: its worktree removed (left by a worker that stopped mid-turn)" in log
    assert done.result_text == "clean"  # it started from the base: no DIRTY
    assert done.is_resume is False and done.turn == 1
    assert done.base_commit == remote.head()
    assert done.changed_files == [
        {"path": "done.txt", "status": "added"},
        {"path": "partial.txt", "status": "added"},
    ]
    assert remote.show(done.head_commit, "done.txt") == "finished"
    second.send_signal(signal.SIGTERM)
    worker_processes.wait(second, timeout=30)
