"""The worktree of a task against what real repositories hold and real remotes do: the
real `git`, bare repositories over file://, the `command` executor's shell as the agent in
its bubblewrap sandbox."""

from __future__ import annotations

import os
import time

import pytest

from controlplane.models import TaskDiff, TaskStatus
from controlplane.services.repositories import repository_set
from tests.git_remotes import bare_remote, git
from tests.worker.conftest import shell_agent
from worker.models import TaskBranch
from worker.workspace.cleanup import workspace_cleanup

pytestmark = pytest.mark.django_db(transaction=True)


def run(worker_factory, settings, script: str, **options):
    worker_factory(shell_agent(script, settings), **options).run_once()


@pytest.fixture
def attached(git_remote, project, alice):
    repository_set(actor=alice, project=project, url=git_remote.url, default_branch="main")
    return git_remote


def cache_dirs(settings, kind: str) -> list[str]:
    folder = os.path.join(settings.WORKER_REPO_CACHE, kind)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


# --- Remotes that fail ------------------------------------------------------------------------


def test_an_unreachable_remote_fails_the_task_naming_it_before_the_agent_runs(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    repository_set(
        actor=alice, project=project, url="https://127.0.0.1:9/nothing.git", default_branch="main"
    )
    task = task_factory(project, alice, branch="main")
    ran = tmp_path / "ran"

    run(worker_factory, settings, f"touch {ran}")

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith("could not fetch https://127.0.0.1:9/nothing.git: ")
    assert "Failed to connect" in task.failure_reason or "Connection refused" in task.failure_reason
    assert not ran.exists() and task.cost_usd == 0
    assert task.worker_runs.get().outcome == "refused"


def test_a_remote_that_never_answers_times_out_and_its_git_is_killed(
    attached, project, alice, task_factory, worker_factory, settings
):
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections wait in the backlog: no TLS handshake ever comes
    url = f"https://127.0.0.1:{silent.getsockname()[1]}/app.git"
    repository_set(actor=alice, project=project, url=url, default_branch="main")
    settings.WORKER_REPO_FETCH_TIMEOUT_SECONDS = 2
    task = task_factory(project, alice, branch="main")
    try:
        started = time.monotonic()
        run(worker_factory, settings, "true")
        seconds = time.monotonic() - started
    finally:
        silent.close()
    task.refresh_from_db()
    assert task.failure_reason == (
        f"fetching {url} timed out after 2s (WORKER_REPO_FETCH_TIMEOUT_SECONDS)"
    )
    assert seconds < 15


def test_a_remote_that_went_away_and_a_branch_that_is_gone(
    attached, project, alice, task_factory, worker_factory, settings
):
    gone = task_factory(project, alice, branch="feature/gone")
    run(worker_factory, settings, "true")
    gone.refresh_from_db()
    assert gone.failure_reason == f"branch 'feature/gone' is not on {attached.url}"

    attached.path.rename(attached.path.with_name("moved.git"))
    task = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "true")
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason.startswith(f"could not fetch {attached.url}: ")
    assert "does not appear to be a git repository" in task.failure_reason
    repository = project.repository
    repository.refresh_from_db()
    assert repository.remote_status == "unreachable" and repository.last_reached_at


def test_the_project_s_repository_removed_after_the_task_was_queued(
    attached, project, alice, task_factory, worker_factory, settings
):
    task = task_factory(project, alice, branch="main")
    project.repository.delete()
    run(worker_factory, settings, "true")
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert "repository was removed" in task.failure_reason


def test_a_file_url_that_became_a_link_to_the_control_plane_is_refused_at_fetch(
    attached, project, alice, task_factory, worker_factory, settings
):
    moved = attached.path.with_name("real.git")
    attached.path.rename(moved)
    attached.path.symlink_to(settings.BASE_DIR)
    task = task_factory(project, alice, branch="main")

    run(worker_factory, settings, "true")

    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert "cannot be used" in task.failure_reason
    assert cache_dirs(settings, "mirrors") == []


# --- History and content ----------------------------------------------------------------------


def test_a_force_pushed_default_branch(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    first = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "echo one >> README.md")
    first.refresh_from_db()
    old_base = first.base_commit
    # main rewritten: a new root commit, the old history unreachable on the remote
    new_base = attached.force_push_new_history({"README.md": "# Rewritten\n"})
    assert new_base != old_base

    second = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "cat README.md")
    second.refresh_from_db()
    assert second.base_commit == new_base and second.result_text == "# Rewritten"

    # the first task goes on from its pushed branch, on a host whose cache is empty
    settings.WORKER_REPO_CACHE = str(tmp_path / "cold-cache")
    first.status, first.turn, first.continuation_prompt = TaskStatus.QUEUED, 2, "again"
    first.save()
    run(worker_factory, settings, "cat README.md; echo two >> README.md")
    first.refresh_from_db()
    assert first.status == TaskStatus.COMPLETED, first.failure_reason
    assert first.result_text == "# Demo\n\nHello.\none"
    assert first.base_commit == old_base
    assert "+two" in TaskDiff.objects.get(task=first).diff


def test_a_force_push_that_took_a_bundled_task_s_base_fails_it_saying_so(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    settings.WORKER_TASK_BRANCH_PUSH = False
    task = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "echo one >> README.md")
    task.refresh_from_db()
    attached.force_push_new_history({"README.md": "# Rewritten\n"})

    settings.WORKER_REPO_CACHE = str(tmp_path / "cold-cache")
    task.status, task.turn, task.continuation_prompt = TaskStatus.QUEUED, 2, "again"
    task.save()
    run(worker_factory, settings, "true")
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == (
        f"the task's worktree could not be prepared: its stored changes need commit "
        f"{task.base_commit}, which the remote no longer has (was {attached.url} force-pushed?)"
    )


def fast_import_history(remote, commits: int) -> None:
    """`commits` commits on `main` of the bare repository, each changing counter.txt, written
    by `git fast-import` in one go."""
    lines = []
    for number in range(1, commits + 1):
        message, content = f"commit {number}\n", f"{number}\n"
        lines += [
            "commit refs/heads/main",
            f"mark :{number}",
            f"committer Test <test@example.com> {1_700_000_000 + number} +0000",
            f"data {len(message)}",
            message.rstrip("\n"),
        ]
        if number > 1:
            lines.append(f"from :{number - 1}")
        lines += ["M 100644 inline counter.txt", f"data {len(content)}", content]
    git("fast-import", "--quiet", "--force", cwd=remote.path, input="\n".join(lines).encode())


def test_a_history_of_10000_commits(
    attached, project, alice, task_factory, worker_factory, settings
):
    fast_import_history(attached, 10_000)
    task = task_factory(project, alice, branch="main")

    started = time.monotonic()
    run(
        worker_factory,
        settings,
        "cat counter.txt; git log --oneline | wc -l; echo x >> counter.txt",
    )

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert task.result_text.split() == ["10000", "10000"]
    assert task.base_commit == attached.head()
    assert task.changed_files == [{"path": "counter.txt", "status": "modified"}]
    assert time.monotonic() - started < 60


def test_a_binary_file_and_a_50_mb_file(
    attached, project, alice, task_factory, worker_factory, settings
):
    big = b"".join(f"line {n:08d} of a large text file\n".encode() for n in range(1_500_000))
    assert len(big) > 50 * 2**20
    attached.commit({"data/big.txt": big, "assets/logo.png": bytes(range(256)) * 64})
    task = task_factory(project, alice, branch="main")
    script = (
        "wc -c < data/big.txt; "
        "sed -i 's/^line 00000007 of/line seven of/' data/big.txt; "
        "printf '\\000\\001\\002' >> assets/logo.png"
    )

    run(worker_factory, settings, script)

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert int(task.result_text) == len(big)
    diff = TaskDiff.objects.get(task=task)
    assert "-line 00000007 of a large text file" in diff.diff
    assert "+line seven of a large text file" in diff.diff
    assert "Binary files a/assets/logo.png and b/assets/logo.png differ" in diff.diff
    assert not diff.truncated and diff.diff_bytes < 10_000
    assert len(git("show", f"{task.head_commit}:data/big.txt", cwd=attached.path)) > 50 * 2**20


def test_a_diff_past_its_limit_is_cut_with_a_closing_line_that_says_so(
    attached, project, alice, task_factory, worker_factory, settings
):
    settings.WORKER_TASK_DIFF_MAX_BYTES = 10_000
    task = task_factory(project, alice, branch="main")

    run(worker_factory, settings, "seq 1 20000 > numbers.txt")

    diff = TaskDiff.objects.get(task=task)
    assert diff.truncated and diff.diff_bytes > 100_000
    assert len(diff.diff.encode()) < 10_300
    assert diff.diff.rstrip().endswith(
        f"the whole change is on the task's branch controlplane/task-{task.pk}]"
    )
    assert f" of {diff.diff_bytes} bytes shown (WORKER_TASK_DIFF_MAX_BYTES)" in diff.diff
    assert "\n[diff truncated: " in diff.diff  # after a whole line


def test_paths_with_spaces_and_non_ascii_names(
    attached, project, alice, task_factory, worker_factory, settings
):
    attached.commit({"docs/read me.md": "old\n", "données/été.txt": "un\n"})
    task = task_factory(project, alice, branch="main")
    script = (
        "echo new >> 'docs/read me.md'; echo deux >> données/été.txt; "
        "mkdir -p 'new dir'; echo 日本 > 'new dir/ファイル.txt'"
    )

    run(worker_factory, settings, script)

    task.refresh_from_db()
    assert task.changed_files == [
        {"path": "docs/read me.md", "status": "modified"},
        {"path": "données/été.txt", "status": "modified"},
        {"path": "new dir/ファイル.txt", "status": "added"},
    ]
    diff = TaskDiff.objects.get(task=task).diff
    assert "+++ b/données/été.txt" in diff and "+日本" in diff


def test_a_submodule_is_left_as_it_is(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    library = bare_remote(tmp_path / "remotes" / "library", {"lib.py": "X = 1\n"})
    git(
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        library.url,
        "vendor/lib",
        cwd=attached.work,
    )
    attached.commit({"app.txt": "uses the library\n"}, "add a submodule")
    task = task_factory(project, alice, branch="main")

    run(worker_factory, settings, "ls -A vendor/lib | wc -l; cat .gitmodules; echo more >> app.txt")

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert task.result_text.splitlines()[0] == "0"  # not checked out: no recursion
    assert task.changed_files == [{"path": "app.txt", "status": "modified"}]
    tree = git("ls-tree", task.head_commit, "vendor/lib", cwd=attached.path)
    assert tree.startswith("160000 commit ")  # the link to the submodule kept as it was


def test_a_turn_that_changes_nothing_stores_nothing(
    attached, project, alice, task_factory, worker_factory, settings
):
    task = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "cat README.md > /dev/null; touch README.md")
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED
    assert (task.head_commit, task.changed_files) == ("", [])
    assert not TaskBranch.objects.filter(task=task).exists()
    assert not TaskDiff.objects.filter(task=task).exists()
    assert attached.branches() == ["main"]


# --- The agent against the worker -------------------------------------------------------------


def test_a_symlink_out_of_the_worktree_lets_neither_the_agent_nor_the_worker_read_outside(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    canary = tmp_path / "outside" / "secret.txt"
    canary.parent.mkdir()
    canary.write_text("CANARY-outside-the-worktree\n")
    os.symlink(str(canary), attached.work / "escape")
    os.symlink("../../../../../../../../" + str(canary).lstrip("/"), attached.work / "relative")
    attached.commit({}, "links out")
    task = task_factory(project, alice, branch="main")
    script = (
        "cat escape relative 2>&1; "
        f"ls {settings.WORKER_REPO_CACHE}/private 2>&1; "
        f"cat {settings.WORKER_REPO_CACHE}/mirrors/*/config 2>&1; "
        f"ls {settings.WORKER_REPO_CACHE}/mirrors/* 2>&1; "
        f"ln -s {canary} planted; ln -s /proc/1/environ environ"
    )

    run(worker_factory, settings, script)

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert "CANARY" not in task.result_text
    assert task.result_text.count("No such file or directory") == 4
    # of the mirror, only the objects its worktree borrows are shown (no config, no refs)
    assert task.result_text.endswith("No such file or directory\nobjects")
    assert {f["path"] for f in task.changed_files} == {"planted", "environ"}
    stored = git("cat-file", "-p", f"{task.head_commit}:planted", cwd=attached.path)
    assert stored == str(canary)  # committed as a link, never read through
    assert "CANARY" not in TaskDiff.objects.get(task=task).diff
    objects = git("rev-list", "--objects", "--all", cwd=attached.path)
    blobs = [line.split()[0] for line in objects.splitlines()]
    contents = git("cat-file", "--batch", cwd=attached.path, input="\n".join(blobs).encode())
    assert "CANARY" not in contents


def test_what_the_agent_writes_in_its_git_folder_never_runs_in_the_worker(
    attached, project, alice, task_factory, worker_factory, settings, tmp_path
):
    ran = tmp_path / "fsmonitor-ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {ran}\n")
    evil.chmod(0o755)
    settings.WORKER_SANDBOX_READ_ONLY = [str(evil)]
    script = (
        f"git config core.fsmonitor {evil}; git config core.hooksPath .git/hooks; "
        f"mkdir -p .git/hooks; cp {evil} .git/hooks/pre-commit; "
        f"mkdir -p sub; mkdir -p /tmp/x; printf 'gitdir: %s\\n' \"$PWD/.git\" > sub/.git; "
        f"echo '* filter=evil' > .gitattributes; echo changed >> README.md"
    )
    task = task_factory(project, alice, branch="main")

    run(worker_factory, settings, script)

    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    assert not ran.exists()
    assert {f["path"] for f in task.changed_files} >= {"README.md", ".gitattributes"}


# Two workers in threads: on the SQLite test database (in memory, shared cache) a write may
# meet the other thread's table lock, which does not wait as a file database's lock does.
@pytest.mark.postgres
def test_two_tasks_of_one_repository_on_one_host_at_once(
    attached, project, alice, task_factory, worker_factory, settings
):
    import threading

    from django.db import connection

    tasks = [task_factory(project, alice, branch="main", prompt=f"task {n}") for n in (1, 2)]
    script = 'sleep 1; echo "$CONTROLPLANE_TASK_ID" > "owner-$CONTROLPLANE_TASK_ID.txt"; ls'
    agent = shell_agent(script, settings)
    errors = []

    def work(name):
        try:
            worker_factory(agent, worker_id=name).run_round(max_tasks=1)
        except Exception as exc:  # pragma: no cover - shown by the assertion
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    for task in tasks:
        task.refresh_from_db()
        assert task.status == TaskStatus.COMPLETED, task.failure_reason
        assert task.changed_files == [{"path": f"owner-{task.pk}.txt", "status": "added"}]
        assert f"owner-{task.pk}.txt" in task.result_text
        other = next(t for t in tasks if t.pk != task.pk)
        assert f"owner-{other.pk}.txt" not in task.result_text  # never the other's worktree
    assert len(cache_dirs(settings, "mirrors")) == 2  # one mirror and its lock file
    assert sorted(attached.branches()) == sorted(
        ["main", *(f"controlplane/task-{t.pk}" for t in tasks)]
    )


# --- Disk bounds and clean-up -----------------------------------------------------------------


def test_a_mirror_past_its_bound_fails_the_task_saying_so(
    attached, project, alice, task_factory, worker_factory, settings
):
    attached.commit({"blob.bin": os.urandom(3 * 2**20)})
    settings.WORKER_REPO_MIRROR_MAX_BYTES = 2**20
    task = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "true")
    task.refresh_from_db()
    assert task.status == TaskStatus.FAILED
    assert "WORKER_REPO_MIRROR_MAX_BYTES" in task.failure_reason


def test_a_worktree_past_its_bound_fails_the_task_before_or_after_the_turn(
    attached, project, alice, task_factory, worker_factory, settings
):
    attached.commit({"blob.bin": os.urandom(2 * 2**20)})
    settings.WORKER_WORKTREE_MAX_BYTES = 2**20
    before = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "true")
    before.refresh_from_db()
    assert before.status == TaskStatus.FAILED
    assert "over WORKER_WORKTREE_MAX_BYTES (1048576)" in before.failure_reason

    settings.WORKER_WORKTREE_MAX_BYTES = 4 * 2**20
    after = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "head -c 5000000 /dev/zero > filler.bin; echo done")
    after.refresh_from_db()
    assert after.status == TaskStatus.FAILED
    assert "after the turn, over WORKER_WORKTREE_MAX_BYTES" in after.failure_reason
    assert after.head_commit == "" and after.result_text == "done"


def test_worktrees_go_when_the_turn_ends_or_after_the_hours_they_are_kept(
    attached, project, alice, task_factory, worker_factory, settings
):
    task = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "echo x >> README.md")
    worktree = os.path.join(settings.WORKER_TASK_ROOT, f"task-{task.pk}", "work")
    assert os.listdir(worktree) == [] and cache_dirs(settings, "tasks") == []

    settings.WORKER_WORKTREE_KEEP_HOURS = 2
    kept = task_factory(project, alice, branch="main")
    run(worker_factory, settings, "echo y >> README.md")
    worktree = os.path.join(settings.WORKER_TASK_ROOT, f"task-{kept.pk}", "work")
    assert "README.md" in os.listdir(worktree)
    assert workspace_cleanup(now=time.time() + 3600) == []
    assert workspace_cleanup(now=time.time() + 3 * 3600) == [kept.pk]
    assert os.listdir(worktree) == []
