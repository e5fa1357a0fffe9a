"""The code signature: what it covers, a worker leaving when its code changes (in process and
as a real process run from a copy of the checkout), what operators see, and the supervisor
that starts such a worker again."""

import json
import os
import re
import shutil
import signal
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import django
import pytest
from django.core.management import call_command
from django.utils import timezone

from automemory.models import SweepState
from controlplane.models import TaskStatus
from controlplane.supervisor import EXIT_RESTART, Supervisor
from worker import processes
from worker.code_signature import EXIT_CODE_CHANGED, CodeSigner
from worker.models import TaskRun, WorkerProcess

from .conftest import BASE_DIR, SpyExecutor, agent_runs, counting_agent, wait_for

# --- The signature ------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path):
    """A small package to sign: two modules, a template, and what is not code."""
    root = tmp_path / "pkg"
    (root / "templates").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "static").mkdir()
    (root / "conf.py").write_text("LIMIT = 10\n")
    (root / "rules.py").write_text("RULES = ['a']\n")
    (root / "templates" / "page.html").write_text("<p>{{ x }}</p>\n")
    (root / "__pycache__" / "conf.cpython-311.pyc").write_bytes(b"\x00compiled")
    (root / "static" / "site.css").write_text("p {}\n")
    (root / "notes.bin").write_bytes(b"\x01")
    return root


def signer_of(root: Path) -> CodeSigner:
    return CodeSigner(roots={"pkg": root}, distributions=())


def test_it_signs_contents_and_names_what_differs(tree):
    signer = signer_of(tree)
    before = signer.compute()
    assert set(before.files) == {"pkg/conf.py", "pkg/rules.py", "pkg/templates/page.html"}

    (tree / "conf.py").write_text("LIMIT = 11\n")
    (tree / "templates" / "page.html").unlink()
    (tree / "extra.py").write_text("")
    after = signer.compute()

    assert after.digest != before.digest
    assert before.differences(after) == ["pkg/conf.py", "+pkg/extra.py", "-pkg/templates/page.html"]


def test_bytecode_static_files_and_unknown_kinds_do_not_count(tree):
    signer = signer_of(tree)
    before = signer.compute()
    (tree / "__pycache__" / "conf.cpython-311.pyc").write_bytes(b"\x00other")
    (tree / "static" / "site.css").write_text("p { color: red }\n")
    (tree / "notes.bin").write_bytes(b"\x02")
    assert signer.compute().digest == before.digest


def test_a_file_changed_and_changed_back_or_rewritten_as_it_was_changes_nothing(tree):
    signer = signer_of(tree)
    before = signer.compute()
    (tree / "conf.py").write_text("LIMIT = 99\n")
    (tree / "conf.py").write_text("LIMIT = 10\n")
    (tree / "rules.py").write_text("RULES = ['a']\n")  # the same bytes, a new mtime
    os.utime(tree / "templates" / "page.html")
    assert signer.compute().digest == before.digest


def test_a_same_size_change_with_its_old_mtime_put_back_is_still_seen(tree):
    path = tree / "rules.py"
    old = path.stat()
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns - 10_000_000_000))  # not racy
    signer = signer_of(tree)
    before = signer.compute()
    assert signer.compute().digest == before.digest  # served from the cache
    stat = path.stat()

    path.write_text("RULES = ['b']\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `cp -p` or `touch -d` would

    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert signer.compute().differences(before) == ["pkg/rules.py"]


def test_the_real_signature_covers_the_three_apps_and_the_sdk_versions():
    signature = CodeSigner().compute()

    assert {"controlplane/settings.py", "automemory/conf.py", "worker/loop.py"} <= set(
        signature.files
    )
    assert any(path.startswith("automemory/templates/") for path in signature.files)
    assert not any("/static/" in path or "__pycache__" in path for path in signature.files)
    assert signature.versions["Django"] == django.__version__
    assert set(signature.versions) == {"Django", "mcp", "openai"}
    assert all(signature.versions.values())
    assert re.fullmatch(r"[0-9a-f]{64}", signature.digest)


# --- A worker whose code changes ---------------------------------------------------------


def test_a_worker_leaves_between_tasks_once_its_code_changed(
    worker_factory, project, queued_task, tree, caplog
):
    tasks = [queued_task(project, prompt=f"t{i}") for i in range(3)]
    executor = SpyExecutor(action=lambda r, c: (tree / "conf.py").write_text("LIMIT = 12\n"))
    worker = worker_factory(
        executor=executor, code_signer=signer_of(tree), code_check_seconds=0.001
    )

    worker.run_once()

    assert [t.status for t in _fresh(tasks)] == [
        TaskStatus.COMPLETED,
        TaskStatus.QUEUED,
        TaskStatus.QUEUED,
    ]
    assert worker.code_changed is not None and worker.stopping and not worker.aborting
    process = WorkerProcess.objects.get(worker_id="test-worker")
    assert process.code_signature == worker.code_watch.started.digest
    assert process.stopped_at is not None
    [line] = [r.getMessage() for r in caplog.records if "code changed" in r.getMessage()]
    assert worker.code_watch.started.short in line and worker.code_changed.short in line
    assert "pkg/conf.py" in line


def test_a_change_undone_within_one_interval_is_not_a_change(
    worker_factory, project, queued_task, tree
):
    tasks = [queued_task(project, prompt=f"t{i}") for i in range(3)]

    def edit_and_undo(request, control):
        (tree / "conf.py").write_text("LIMIT = 12\n")
        (tree / "conf.py").write_text("LIMIT = 10\n")

    worker = worker_factory(
        executor=SpyExecutor(action=edit_and_undo),
        code_signer=signer_of(tree),
        code_check_seconds=0.001,
    )

    worker.run_once()

    assert {t.status for t in _fresh(tasks)} == {TaskStatus.COMPLETED}
    assert worker.code_changed is None


def test_no_check_runs_before_the_interval_or_when_it_is_0(
    worker_factory, project, queued_task, tree
):
    for seconds in (3600, 0):
        tasks = [queued_task(project, prompt=f"t{i}") for i in range(2)]
        (tree / "conf.py").write_text(f"LIMIT = {seconds}\n")
        executor = SpyExecutor(action=lambda r, c: (tree / "rules.py").write_text(f"{r}\n"))
        worker = worker_factory(
            executor=executor, code_signer=signer_of(tree), code_check_seconds=seconds
        )
        worker.run_once()
        assert {t.status for t in _fresh(tasks)} == {TaskStatus.COMPLETED}
        assert worker.code_changed is None


def test_the_sweeper_role_leaves_between_sweeps_and_lets_go_of_its_lease(
    worker_factory, memory_hooks, tree
):
    worker = worker_factory(
        role="sweeper", sweep_interval=0.05, code_signer=signer_of(tree), code_check_seconds=0.2
    )
    deadline = time.monotonic() + 10

    def sweep(wait=0):
        (tree / "conf.py").write_text(f"{time.time()}\n")
        worker.stopping = worker.stopping or time.monotonic() > deadline  # never hang

    memory_hooks.run = sweep

    worker.run_forever()

    assert worker.code_changed is not None
    assert time.monotonic() < deadline
    assert memory_hooks.releases == 1


def _fresh(tasks):
    for task in tasks:
        task.refresh_from_db()
    return tasks


# --- Real worker processes, run from a copy of the checkout ------------------------------


@pytest.fixture
def checkout_copy(tmp_path):
    """The three apps, manage.py and the test settings, copied: a worker run from here (with
    PYTHONPATH on it) imports this code, and the test can change it."""
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    for app in ("controlplane", "automemory", "worker"):
        shutil.copytree(BASE_DIR / app, copy / app, ignore=ignore)
    shutil.copy2(BASE_DIR / "manage.py", copy / "manage.py")
    (copy / "tests").mkdir()
    for name in ("__init__.py", "settings.py"):
        shutil.copy2(BASE_DIR / "tests" / name, copy / "tests" / name)
    return copy


def _copy_env(copy: Path, **extra: str) -> dict:
    return {"PYTHONPATH": str(copy), "WORKER_CODE_CHECK_SECONDS": "1", **extra}


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_automemory_code_changes_finishes_its_task_and_exits_75(
    shared_db, worker_processes, checkout_copy, tmp_path
):
    runs = tmp_path / "runs"
    runs.mkdir()
    ids = shared_db.seed_tasks(4)
    env = _copy_env(
        checkout_copy,
        WORKER_COMMAND=counting_agent(runs, seconds=1.0),
        WORKER_SANDBOX_WRITABLE=str(runs),  # where the agent counts its runs
    )
    proc = worker_processes.start(
        shared_db,
        "--executor",
        "command",
        "--poll-interval",
        "0.05",
        "--worker-id",
        "old-code",
        env=env,
        base_dir=checkout_copy,
    )
    running = wait_for(
        lambda: shared_db.tasks().filter(status=TaskStatus.RUNNING).first(),
        timeout=60,
        message=f"no task started:\n{worker_processes.log(proc)}",
    )

    conf = checkout_copy / "automemory" / "conf.py"
    conf.write_text(conf.read_text() + "\n# a new release\n")
    changed = time.monotonic()

    assert worker_processes.wait(proc, timeout=60) == EXIT_CODE_CHANGED, worker_processes.log(proc)
    # Its turn (1 s) and one check interval (1 s), with room for a busy machine.
    assert time.monotonic() - changed < 8, worker_processes.log(proc)
    log = worker_processes.log(proc)
    [line] = [line for line in log.splitlines() if "code changed" in line]
    assert "automemory/conf.py" in line and "exiting (status 75)" in line
    tasks = {task.pk: task for task in shared_db.tasks().filter(pk__in=ids)}
    assert tasks[running.pk].status == TaskStatus.COMPLETED
    assert {task.status for task in tasks.values()} <= {TaskStatus.COMPLETED, TaskStatus.QUEUED}
    assert TaskStatus.QUEUED in {task.status for task in tasks.values()}, "it kept claiming"
    old = WorkerProcess.objects.using(shared_db.alias).get(worker_id="old-code")
    assert old.stopped_at is not None and len(old.code_signature) == 64
    assert not SweepState.objects.using(shared_db.alias).filter(lease_token__isnull=False).exists()

    # Started again on the new code: it runs the rest, and no task ran twice.
    again = worker_processes.start(
        shared_db,
        "--once",
        "--executor",
        "command",
        "--worker-id",
        "new-code",
        env=env,
        base_dir=checkout_copy,
    )
    assert worker_processes.wait(again, timeout=60) == 0, worker_processes.log(again)
    assert {t.status for t in shared_db.tasks().filter(pk__in=ids)} == {TaskStatus.COMPLETED}
    assert agent_runs(runs) == {task_id: 1 for task_id in ids}
    outcomes = TaskRun.objects.using(shared_db.alias).filter(task_id__in=ids)
    assert sorted(run.task_id for run in outcomes) == sorted(ids)
    new = WorkerProcess.objects.using(shared_db.alias).get(worker_id="new-code")
    assert new.code_signature not in ("", old.code_signature)


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_files_are_touched_or_changed_back_keeps_running(
    shared_db, worker_processes, checkout_copy
):
    proc = worker_processes.start(
        shared_db,
        "--executor",
        "echo",
        "--poll-interval",
        "0.05",
        "--worker-id",
        "steady",
        env=_copy_env(checkout_copy),
        base_dir=checkout_copy,
    )
    wait_for(
        lambda: WorkerProcess.objects.using(shared_db.alias).filter(worker_id="steady").exists(),
        timeout=60,
        message=f"worker did not start:\n{worker_processes.log(proc)}",
    )
    conf = checkout_copy / "automemory" / "conf.py"
    original = conf.read_bytes()
    edited = checkout_copy / "edited.tmp"
    edited.write_bytes(original + b"\n# an edit undone at once\n")
    restored = checkout_copy / "restored.tmp"
    restored.write_bytes(original)
    os.replace(edited, conf)
    os.replace(restored, conf)  # changed back within one interval
    loop = checkout_copy / "worker" / "loop.py"
    loop.write_bytes(loop.read_bytes())  # rewritten as it was
    os.utime(checkout_copy / "controlplane" / "settings.py")

    time.sleep(3.5)  # three check intervals
    ids = shared_db.seed_tasks(3)
    wait_for(
        lambda: shared_db.tasks().filter(pk__in=ids, status=TaskStatus.COMPLETED).count() == 3,
        timeout=60,
        message=f"tasks not run:\n{worker_processes.log(proc)}",
    )

    assert proc.poll() is None, worker_processes.log(proc)
    assert "code changed" not in worker_processes.log(proc)
    proc.send_signal(signal.SIGTERM)
    assert worker_processes.wait(proc, timeout=30) == 0, worker_processes.log(proc)


# --- What operators see ------------------------------------------------------------------


@pytest.fixture
def mixed_code(db):
    """w-old-1 and w-old-2 run code A (w-old-2 restarted recently on a host the deploy missed),
    w-new runs B, deployed an hour ago; w-gone ran C and stopped; w-unknown reported none."""
    now = timezone.now()
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    for worker_id, signature, age in [
        ("w-old-1", a, timedelta(days=2)),
        ("w-new", b, timedelta(hours=1)),
        ("w-old-2", a, timedelta(minutes=5)),
        ("w-gone", c, timedelta(minutes=1)),
        ("w-unknown", "", timedelta(minutes=2)),
    ]:
        processes.worker_register(
            worker_id=worker_id, executor="echo", code_signature=signature, now=now - age
        )
        processes.worker_seen(worker_id=worker_id, now=now)
    processes.worker_stopped(worker_id="w-gone", now=now)
    return {"a": a, "b": b, "c": c}


def test_workers_shows_each_code_signature_and_whether_it_is_the_newest(mixed_code):
    out = StringIO()
    call_command("workers", "--all", stdout=out)
    lines = out.getvalue().splitlines()
    header = lines[0].split()
    code, newest = header.index("CODE"), header.index("NEWEST")
    # Columns after LAST SEEN shift by one: "5s ago" is two words.
    rows = {line.split()[0]: line.split()[code + 1 : newest + 2] for line in lines[1:]}

    assert rows["w-new"] == ["b" * 12, "yes"]
    assert rows["w-old-1"] == ["a" * 12, "NO"]
    assert rows["w-old-2"] == ["a" * 12, "NO"]
    assert rows["w-gone"] == ["c" * 12, "NO"]
    assert rows["w-unknown"] == ["-", "-"]

    out = StringIO()
    call_command("workers", "--json", stdout=out)
    listed = {row["worker_id"]: row for row in json.loads(out.getvalue())}
    assert listed["w-new"]["code_signature"] == mixed_code["b"]
    assert listed["w-new"]["code_newest"] is True
    assert listed["w-old-2"]["code_newest"] is False
    assert listed["w-unknown"]["code_newest"] is None


def test_the_admin_shows_the_code_and_whether_it_is_the_newest(mixed_code, client, staff):
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)

    page = client.get("/admin/worker/workerprocess/").content.decode()

    assert page.count("a" * 12) == 2 and page.count("b" * 12) == 1
    rows = {m[0]: m[1] for m in re.findall(r"(w-[a-z0-9-]+)</a>.*?icon-(yes|no|unknown)", page)}
    assert rows == {
        "w-new": "yes",
        "w-old-1": "no",
        "w-old-2": "no",
        "w-gone": "no",
        "w-unknown": "unknown",
    }


# --- The supervisor behind `make run` ------------------------------------------------------


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_supervisor_starts_again_a_worker_that_asks_and_only_that_one(tmp_path):
    marker = tmp_path / "restarted"
    ready = tmp_path / "api-ready"
    worker = _child(
        "import pathlib, sys\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        f"ready = pathlib.Path({str(ready)!r})\n"
        "import time\n"
        "while not ready.exists(): time.sleep(0.01)\n"
        f"if not m.exists(): m.touch(); sys.exit({EXIT_RESTART})\n"
        "sys.exit(3)\n"
    )
    api = _child(
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)"
    )
    supervisor = Supervisor(
        {"api": api, "worker": worker},
        poll_seconds=0.05,
        restartable={"worker"},
        restart_min_seconds=0,
    )

    code = supervisor.run()

    assert code == 3  # the restarted worker's own exit then stops the rest, as before
    assert supervisor.restarts == {"worker": 1}
    assert supervisor.children["api"].returncode == 7


def test_the_supervisor_does_not_restart_a_child_not_named_restartable(tmp_path):
    supervisor = Supervisor({"api": _child(f"import sys; sys.exit({EXIT_RESTART})")})
    assert supervisor.run() == EXIT_RESTART
    assert supervisor.restarts == {}
