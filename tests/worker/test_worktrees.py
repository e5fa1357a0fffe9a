"""Tasks on a project with a repository, through the real worker loop and the real `git`:
a bare repository over file:// on this machine, the `command` executor as the agent (a
shell script that reads and changes files in its worktree)."""

from __future__ import annotations

import time

import pytest

from controlplane.models import TaskDiff, TaskStatus
from controlplane.services.repositories import repository_set
from tests.git_remotes import SmartHttpServer, git, self_signed_certificate
from tests.worker.conftest import shell_agent as agent
from worker.models import TaskBranch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def remote(git_remote):
    return git_remote


def test_a_turn_runs_in_a_worktree_and_its_change_is_committed_diffed_and_pushed(
    remote, project, alice, task_factory, worker_factory, settings
):
    repository_set(actor=alice, project=project, url=remote.url, default_branch="main")
    base = remote.head()
    task = task_factory(project, alice, branch="main")
    script = (
        "cat README.md; git status --short; echo 'print(42)' >> src/app.py; echo new > notes.txt"
    )

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


# --- Over smart HTTP (git http-backend behind HTTPS) that asks for a credential -------------


@pytest.fixture
def https_remote(remote, tmp_path, monkeypatch):
    """`remote` served at https://127.0.0.1:<port>/remote.git: `writer` may push, `reader`
    may only fetch; git trusts the server's certificate through GIT_SSL_CAINFO."""
    cert, key = self_signed_certificate(tmp_path)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    git("config", "http.receivepack", "true", cwd=remote.path)
    users = {"writer": (WRITE_TOKEN, True), "reader": (READ_TOKEN, False)}
    with SmartHttpServer(root=remote.path.parent, users=users, cert=cert, key=key) as server:
        yield server


WRITE_TOKEN = "ghp_WriteTokenForTheTests0123456789abcd"
READ_TOKEN = "ghp_ReadTokenForTheTests0123456789abcde"


def test_over_https_a_write_credential_pushes_the_task_branch(
    remote, https_remote, project, alice, task_factory, worker_factory, settings
):
    url = https_remote.url("remote.git", user="writer")
    repository_set(
        actor=alice, project=project, url=url, default_branch="main", credential=WRITE_TOKEN
    )
    task = task_factory(project, alice, branch="main")

    worker_factory(agent("echo changed >> README.md", settings)).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert remote.head(f"controlplane/task-{task.pk}") == task.head_commit
    assert TaskBranch.objects.get(task=task).storage == "remote"
    assert ("/remote.git/git-receive-pack", "writer", 200) in https_remote.requests
    repository = project.repository
    repository.refresh_from_db()
    assert repository.remote_status == "reachable"


def test_over_https_a_read_only_credential_keeps_the_branch_as_a_bundle(
    remote, https_remote, project, alice, task_factory, worker_factory, settings
):
    url = https_remote.url("remote.git", user="reader")
    repository_set(
        actor=alice, project=project, url=url, default_branch="main", credential=READ_TOKEN
    )
    task = task_factory(project, alice, branch="main")

    worker_factory(agent("echo changed >> README.md", settings)).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert f"controlplane/task-{task.pk}" not in remote.branches()
    stored = TaskBranch.objects.get(task=task)
    assert stored.storage == "database" and stored.size > 0
    assert ("/remote.git/info/refs", "reader", 403) in https_remote.requests  # push refused


def test_over_https_a_wrong_credential_fails_the_task_before_the_agent_runs(
    remote, https_remote, project, alice, task_factory, worker_factory, settings, tmp_path
):
    url = https_remote.url("remote.git", user="reader")
    repository_set(
        actor=alice, project=project, url=url, default_branch="main", credential="wrong-token-1234"
    )
    task = task_factory(project, alice, branch="main")
    ran = tmp_path / "agent-ran"

    worker_factory(agent(f"touch {ran}", settings)).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith(f"could not fetch {url}: ")
    assert "Authentication failed" in task.failure_reason
    assert "wrong-token-1234" not in task.failure_reason
    assert not ran.exists()
    assert task.cost_usd == 0 and not task.base_commit
    repository = project.repository
    repository.refresh_from_db()
    assert repository.remote_status == "unreachable"
    assert "Authentication failed" in repository.last_error


def test_without_a_credential_the_server_s_question_is_not_answered(
    remote, https_remote, project, alice, task_factory, worker_factory, settings
):
    repository_set(
        actor=alice, project=project, url=https_remote.url("remote.git"), default_branch="main"
    )
    task = task_factory(project, alice, branch="main")

    worker_factory(agent("true", settings)).run_once()

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert (
        "terminal prompts disabled" in task.failure_reason
        or "Authentication" in task.failure_reason
    )


def test_the_credential_appears_nowhere_but_its_encrypted_row(
    remote,
    https_remote,
    project,
    alice,
    task_factory,
    worker_factory,
    settings,
    api_client_for,
    caplog,
    tmp_path,
):
    """Over smart HTTP with a write credential: every process's command line and
    environment while the worker runs, the logs, the task's result, events and failure
    reason, the audit log, every table but the repository's ciphertext, the API's answers,
    and what the agent can read: none holds the token."""
    import threading
    from pathlib import Path

    from django.db import connection

    from controlplane.models import Repository

    client = api_client_for(alice)
    url = https_remote.url("remote.git", user="writer")
    put = client.put(
        f"/projects/{project.pk}/repository",
        {"url": url, "default_branch": "main", "credential": WRITE_TOKEN},
        format="json",
    )
    assert put.status_code == 201
    task = task_factory(project, alice, branch="main")
    seen, stop = [], threading.Event()

    def watch_processes():
        while not stop.is_set():
            for path in Path("/proc").glob("[0-9]*"):
                for name in ("cmdline", "environ"):
                    try:
                        data = (path / name).read_bytes()
                    except OSError:
                        continue
                    if WRITE_TOKEN.encode() in data:
                        seen.append((path.name, name, data[:200]))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch_processes, daemon=True)
    watcher.start()
    needle = tmp_path / "needle"
    needle.write_text(WRITE_TOKEN + "\n")
    settings.WORKER_SANDBOX_READ_ONLY = [str(needle)]
    script = (
        f"grep -rlF -f {needle} {settings.WORKER_REPO_CACHE} {settings.WORKER_TASK_ROOT} "
        "/proc/*/environ /proc/*/cmdline 2>/dev/null; env; echo changed >> README.md"
    )
    try:
        with caplog.at_level("DEBUG"):
            worker_factory(agent(script, settings)).run_once()
    finally:
        stop.set()
        watcher.join(5)

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert ("/remote.git/git-receive-pack", "writer", 200) in https_remote.requests
    assert seen == []
    assert WRITE_TOKEN not in caplog.text
    assert WRITE_TOKEN not in task.result_text + task.failure_reason
    assert "GIT_ASKPASS" not in task.result_text  # the agent's environment has none of git's
    answers = [
        client.get(f"/projects/{project.pk}/repository").content,
        client.get(f"/tasks/{task.pk}").content,
        client.get(f"/tasks/{task.pk}/diff").content,
        client.get(f"/tasks/{task.pk}/runs").content,
        put.content,
    ]
    assert not [answer for answer in answers if WRITE_TOKEN.encode() in answer]
    ciphertext = Repository.objects.get(project=project).credential_ciphertext
    tables = connection.introspection.table_names()
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                text = " ".join(
                    bytes(value).decode("latin-1")
                    if isinstance(value, bytes | memoryview)
                    else str(value)
                    for value in row
                )
                assert WRITE_TOKEN not in text, table
                if ciphertext in text:
                    assert table == "repositories"
    leftovers = [
        path
        for path in Path(settings.WORKER_REPO_CACHE).rglob("*")
        if path.is_file() and WRITE_TOKEN.encode() in path.read_bytes()
    ]
    assert leftovers == []  # the credential file went with its git command
