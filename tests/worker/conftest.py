"""Worker fixtures: stubbed memory hooks, workers, spy executors, and a database that real
`manage.py run_worker` processes can share with the test."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from automemory.services.extraction.log import SweepSummary
from automemory.services.injector import InjectionResult
from controlplane.models import Membership, Project, Role, Task
from worker.executors import ExecutionResult
from worker.executors.echo import EchoExecutor
from worker.loop import Worker

BASE_DIR = Path(settings.BASE_DIR)


@dataclass
class MemoryHooks:
    """Stands in for the auto-memory services; tests swap `inject` / `sweep` behaviour."""

    inject_calls: list = field(default_factory=list)
    sweeps: int = 0
    inject_error: Exception | None = None
    sweep_error: Exception | None = None
    prefix: str = ""
    memory_ids: list = field(default_factory=list)

    def inject(self, *, task, prompt, goal, actor_label="", preferences=None, code=None):
        self.inject_calls.append({"task_id": task.pk, "prompt": prompt, "goal": goal})
        if self.inject_error:
            raise self.inject_error
        if not self.prefix:
            return InjectionResult(prompt=prompt, goal=goal, memory_ids=[])
        return InjectionResult(
            prompt=self.prefix + prompt,
            goal=(self.prefix + goal) if goal else goal,
            memory_ids=list(self.memory_ids),
        )

    # The sweeper the worker is given (`Worker(sweeper=...)`): its turns, stop and release.
    stops: int = 0
    releases: int = 0

    def run(self, wait=0):
        self.sweeps += 1
        if self.sweep_error:
            raise self.sweep_error
        return SweepSummary()

    def stop(self):
        self.stops += 1

    def release(self):
        self.releases += 1


@pytest.fixture(autouse=True)
def memory_hooks(monkeypatch):
    hooks = MemoryHooks()
    monkeypatch.setattr("automemory.services.injector.inject_memories", hooks.inject)
    return hooks


class SpyExecutor:
    """Records requests; returns `result` (default: completed with the request's text)."""

    name = "spy"

    def __init__(self, result: ExecutionResult | None = None, action=None):
        self.requests = []
        self.result = result
        self.action = action

    def execute(self, request, *, control):
        self.requests.append(request)
        if self.action:
            self.action(request, control)
        return self.result or ExecutionResult(status="completed", result_text=request.text)


@pytest.fixture
def spy_executor():
    return SpyExecutor()


@pytest.fixture
def worker_factory(db, memory_hooks):
    def make(executor=None, **options):
        options.setdefault("sweeper", memory_hooks)
        options.setdefault("heartbeat_seconds", 0)
        options.setdefault("poll_interval", 0)
        options.setdefault("worker_id", "test-worker")
        return Worker(executor=executor or EchoExecutor(), **options)

    return make


@pytest.fixture
def worker(worker_factory):
    return worker_factory()


# --- Real worker processes ----------------------------------------------------------------


@dataclass
class SharedDatabase:
    """A database the test and `run_worker` subprocesses both reach: `alias` here, `url` there."""

    alias: str
    url: str

    def seed_tasks(self, count: int, *, prompt: str = "task {i}", **fields) -> list[int]:
        db = self.alias
        user, _ = get_user_model().objects.db_manager(db).get_or_create(username="proc-alice")
        project = Project.objects.using(db).create(name="proc project", created_by=user)
        Membership.objects.using(db).create(project=project, user=user, role=Role.OWNER)
        now = timezone.now()
        tasks = Task.objects.using(db).bulk_create(
            [
                Task(
                    project=project,
                    user=user,
                    prompt=prompt.format(i=i),
                    queued_at=now,
                    **fields,
                )
                for i in range(count)
            ]
        )
        if tasks and tasks[0].pk is None:  # backends that do not return ids
            return list(Task.objects.using(db).filter(project=project).values_list("id", flat=True))
        return [task.pk for task in tasks]

    def tasks(self):
        return Task.objects.using(self.alias)


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _postgres_url(settings_dict: dict) -> str:
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or "5432"
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


@pytest.fixture(scope="session")
def _migrated_sqlite_template(tmp_path_factory, django_db_setup, django_db_blocker):
    """A migrated SQLite file, made once; each process test copies it."""
    path = tmp_path_factory.mktemp("worker-db") / "template.sqlite3"
    alias = "worker_template"
    _add_sqlite_alias(alias, path)
    try:
        with django_db_blocker.unblock():
            call_command("migrate", database=alias, verbosity=0, interactive=False)
            with connections[alias].cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        _drop_alias(alias)
    return path


@pytest.fixture
def shared_db(request, tmp_path, django_db_blocker):
    """On PostgreSQL: the test database itself. On SQLite: a migrated file under tmp_path.

    Tests using it are marked `django_db(transaction=True)`: their writes must be committed
    for the worker processes to see them, and the test database is flushed afterwards.
    """
    if connection.vendor == "postgresql":
        yield SharedDatabase(alias="default", url=_postgres_url(connection.settings_dict))
        return
    template = request.getfixturevalue("_migrated_sqlite_template")
    path = tmp_path / "worker.sqlite3"
    shutil.copyfile(template, path)
    alias = "worker_processes"
    _add_sqlite_alias(alias, path)
    try:
        with django_db_blocker.unblock():
            yield SharedDatabase(alias=alias, url=_sqlite_url(path))
    finally:
        _drop_alias(alias)


def _add_sqlite_alias(alias: str, path: Path) -> None:
    connections.settings[alias] = {
        **connections["default"].settings_dict,
        "NAME": str(path),
        "TEST": {"NAME": str(path)},
    }


def _drop_alias(alias: str) -> None:
    connections[alias].close()
    del connections.settings[alias]
    if hasattr(connections._connections, alias):
        delattr(connections._connections, alias)


class WorkerProcesses:
    """Starts `manage.py run_worker` subprocesses and makes sure none outlives the test."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(
        self, db: SharedDatabase, *args: str, env: dict | None = None, base_dir: Path = BASE_DIR
    ) -> subprocess.Popen:
        """`base_dir/manage.py run_worker *args` (another copy of the checkout runs its own
        code when `env` sets PYTHONPATH to it)."""
        log = self.tmp_path / f"worker-{len(self.procs)}.log"
        child_env = {
            **os.environ,
            "DATABASE_URL": db.url,
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "WORKER_HEARTBEAT_SECONDS": "1",
            **(env or {}),
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(base_dir / "manage.py"), "run_worker", *args],
                cwd=base_dir,
                env=child_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append((proc, log))
        return proc

    def log(self, proc: subprocess.Popen) -> str:
        for candidate, path in self.procs:
            if candidate is proc:
                return path.read_text(errors="replace")
        return ""

    def logs(self) -> str:
        return "\n".join(
            f"--- worker {i} ---\n{path.read_text(errors='replace')}"
            for i, (_, path) in enumerate(self.procs)
        )

    def wait(self, proc: subprocess.Popen, timeout: float) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"worker did not exit in {timeout}s:\n{self.log(proc)}") from None

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


@pytest.fixture
def worker_processes(tmp_path):
    procs = WorkerProcesses(tmp_path)
    yield procs
    procs.stop_all()


def counting_agent(runs_dir: Path, seconds: float = 0.1) -> str:
    """A `WORKER_COMMAND` agent that sleeps `seconds` and leaves one line per run in
    `runs_dir/<task id>`: how many times each task's agent really ran, whatever the
    database says."""
    script = (
        f'echo run >> {shlex.quote(str(runs_dir))}/"$CONTROLPLANE_TASK_ID";'
        f" sleep {seconds}; echo ok"
    )
    return f"sh -c {shlex.quote(script)}"


def agent_runs(runs_dir: Path) -> dict[int, int]:
    """Runs per task id, as `counting_agent` left them."""
    return {int(path.name): len(path.read_text().splitlines()) for path in runs_dir.iterdir()}


def wait_for(predicate, *, timeout: float, interval: float = 0.05, message: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(message or "condition not met in time")


@pytest.fixture
def queued_task(task_factory):
    """A queued task; `queued_at` may be given (the shared factory always uses now)."""

    def make(project, *, queued_at=None, **fields):
        task = task_factory(project, **fields)
        if queued_at is not None:
            Task.objects.filter(pk=task.pk).update(queued_at=queued_at)
            task.refresh_from_db()
        return task

    return make


# --- Object storage for codex session records -------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto's server mode) on 127.0.0.1 for the whole session."""
    from tests.worker.s3_server import S3Server

    with S3Server(tmp_path_factory.mktemp("s3") / "s3-server.log") as server:
        yield server


@pytest.fixture
def session_bucket(s3_server, settings, monkeypatch):
    """Codex session records go to a new bucket of `s3_server` (WORKER_CODEX_SESSION_STORAGE).

    Returns a boto3 client of the bucket's server and the bucket's name, for the tests to look
    at (or damage) what was stored.
    """
    import uuid

    import boto3

    from controlplane.settings import object_storage_settings

    for name, value in {
        "AWS_ACCESS_KEY_ID": "test-access-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret-key",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"sessions-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/codex?endpoint_url={s3_server.endpoint_url}&region_name=us-east-1"
    settings.WORKER_CODEX_SESSION_STORAGE = url
    settings.STORAGES = {**settings.STORAGES, "codex_sessions": object_storage_settings(url)}
    return SimpleNamespace(client=client, bucket=bucket, prefix="codex/")


def processes_running(needle: str) -> list[int]:
    """The host's processes whose command line holds `needle` (an agent in a sandbox has
    another pid inside it, so tests find it by its script's path)."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(path.parent.name))
    return found


# --- Repositories -------------------------------------------------------------------------


@pytest.fixture
def git_remote(tmp_path, settings):
    """A real bare repository over file:// (README.md, src/app.py on `main`), with this
    test's own repository cache and task root."""
    from tests.git_remotes import bare_remote

    settings.REPOSITORY_FILE_ROOTS = [str(tmp_path / "remotes")]
    settings.WORKER_REPO_CACHE = str(tmp_path / "cache")
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    (tmp_path / "remotes").mkdir()
    return bare_remote(
        tmp_path / "remotes",
        {"README.md": "# Demo\n\nHello.\n", "src/app.py": "print('hello')\n"},
    )


def shell_agent(script: str, settings):
    """The `command` executor running `sh -c script` as the agent (in its sandbox)."""
    from worker.executors.command import CommandExecutor

    settings.WORKER_COMMAND = f"sh -c {shlex.quote(script)}"
    return CommandExecutor()
