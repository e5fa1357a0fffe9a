"""What every benchmark script shares: set-up, a throwaway database, seeding, timing, output.

A script is a plain file run from the repository root (after `make setup`)::

    .venv/bin/python benchmarks/bench_<name>.py [--postgres URL] [--save]

and uses this module for everything that is not its own measurement:

- **Django set-up** with the benchmarks' settings (`benchmarks/settings.py`: the project's,
  with a key of their own, so no `SECRET_KEY` is needed): `setup_django`.
- **A throwaway database**: a SQLite file in a temporary directory, or with `--postgres
  URL` (or a PostgreSQL `DATABASE_URL`) a database created next to the one named and
  dropped at the end; `--database URL` runs in an existing empty database and keeps it.
  `run(args)` creates it, sets Django up on it and migrates. Scripts that start processes
  or need several databases use `Databases` and `child_env`.
- **Seeding**: `user_create`, `project_create`, `tasks_queue`, `tasks_completed`.
- **Timing and query capture**: `timed` (median and best of repeated calls), `captured`
  (the statements a block ran, and their time inside the database), `Timing`.
- **Output the docs can reuse**: with `--save`, what the script printed is written to
  `docs/figures/<script>[.<database>].txt` with the command, the date, the commit, the
  databases and the machine, so the docs point at figures instead of retyping them.
- **The extraction sweep**: `sweep()`, the one place that imports it.

Figures are printed, never asserted: a benchmark is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
MANAGE = str(BASE_DIR / "manage.py")
FIGURES_DIR = BASE_DIR / "docs" / "figures"
SETTINGS_MODULE = "benchmarks.settings"

if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))


# --- The extraction sweep --------------------------------------------------------------------


def sweep(**kwargs):
    """Run the auto memory extraction sweep (`process_auto_memories(**kwargs)`).

    The one import of it in the benchmarks.
    """
    from automemory.services.extraction.sweep import process_auto_memories

    return process_auto_memories(**kwargs)


# --- Arguments and the run -------------------------------------------------------------------


def parser(doc: str | None, *, database: bool = True) -> argparse.ArgumentParser:
    """An argument parser described by the script's docstring, with the common options."""
    lines = (doc or "").strip().splitlines()
    result = argparse.ArgumentParser(
        description=lines[0] if lines else None,
        epilog="\n".join(lines[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if database:
        result.add_argument(
            "--postgres",
            metavar="URL",
            default=postgres_from_environment(),
            help="run on PostgreSQL: a throwaway database next to the one named, dropped at "
            "the end (default: DATABASE_URL when it names PostgreSQL, else a SQLite file)",
        )
        result.add_argument(
            "--database",
            metavar="URL",
            help="run in this existing, empty database and keep what the run wrote",
        )
    result.add_argument(
        "--save",
        action="store_true",
        help="also write what is printed to docs/figures/<script>[.<database>].txt",
    )
    return result


def postgres_from_environment() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


@contextlib.contextmanager
def run(args: argparse.Namespace, *, database: bool = True, migrate: bool = True) -> Iterator[Run]:
    """The script's run: its database (throwaway unless `--database`), Django set up on it
    and migrated, the output saved with `--save`; everything undone at the end."""
    bench = Run(script=Path(sys.argv[0]).stem, save=getattr(args, "save", False))
    # SIGTERM ends the run as Ctrl-C does: the throwaway database is dropped on the way out.
    signal.signal(signal.SIGTERM, _terminated)
    with bench.output():
        if not database:
            setup_django()
            yield bench
            return
        databases = Databases(getattr(args, "postgres", None))
        try:
            url = getattr(args, "database", None) or databases.new(bench.script)
            setup_django(url)
            from django.db import connection

            bench.vendor = connection.vendor
            bench.note_database(connection.vendor, _server_version())
            if migrate:
                from django.core.management import call_command

                call_command("migrate", verbosity=0)
            print(f"database: {connection.vendor}")
            yield bench
        finally:
            from django.db import connections

            connections.close_all()
            databases.close()


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


@dataclass
class Run:
    """One run of a script: what it printed, and on what, for `--save`."""

    script: str
    save: bool = False
    vendor: str | None = None
    databases: dict[str, str] = field(default_factory=dict)

    def note_database(self, vendor: str, version: str) -> None:
        self.databases[vendor] = version

    @contextlib.contextmanager
    def output(self) -> Iterator[None]:
        if not self.save:
            yield
            return
        buffer = io.StringIO()
        tee = _Tee(sys.stdout, buffer)
        started = datetime.now(UTC)
        with contextlib.redirect_stdout(tee):
            yield
        self._write(buffer.getvalue(), started)

    def _write(self, text: str, started: datetime) -> None:
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        name = self.script if self.vendor is None else f"{self.script}.{self.vendor}"
        path = FIGURES_DIR / f"{name}.txt"
        header = [
            f"# {_command()}",
            f"# {started:%Y-%m-%d %H:%M} UTC, commit {_commit()}",
            f"# {machine()}",
        ]
        if self.databases:
            header.append(
                "# " + "; ".join(f"{v} {version}" for v, version in self.databases.items())
            )
        path.write_text("\n".join(header) + "\n\n" + text)
        print(f"(saved to {path.relative_to(BASE_DIR)})", file=sys.stderr)


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def _command() -> str:
    argv = [_masked(arg) for arg in sys.argv]
    script = os.path.relpath(argv[0], BASE_DIR) if os.path.isabs(argv[0]) else argv[0]
    return shlex.join([".venv/bin/python", script, *argv[1:]])


def _masked(text: str) -> str:
    """A URL with its password replaced by ***."""
    return re.sub(r"(://[^:/@\s]+:)[^@/\s]+@", r"\1***@", text)


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} with local changes" if dirty else head


def machine() -> str:
    """The facts a figure depends on: OS, CPU count, load, Python."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load}, Python {platform.python_version()}"
    )


def _server_version() -> str:
    from django.db import connection

    if connection.vendor == "sqlite":
        return connection.Database.sqlite_version  # the SQLite Django runs on
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return cursor.fetchone()[0].split()[0]


# --- Django and databases --------------------------------------------------------------------


def child_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a process started on `database_url` (a worker, a child script)."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(BASE_DIR), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def setup_django(database_url: str | None = None) -> None:
    """Django set up with the benchmarks' settings, on `database_url` when given."""
    if database_url is not None:
        os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def child(script: str, database_url: str, *args: str) -> None:
    """Run `script` with `args` in a child process on `database_url`, printing its output as
    it comes (through this process's stdout, so `--save` keeps it)."""
    proc = subprocess.Popen(
        [sys.executable, script, *args],
        cwd=BASE_DIR,
        env=child_env(database_url),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"{script} {' '.join(args)} failed (exit {proc.returncode})")


def child_output(script: str, database_url: str, *args: str) -> str:
    """Run `script` with `args` in a child on `database_url` and return what it printed."""
    result = subprocess.run(
        [sys.executable, script, *args],
        cwd=BASE_DIR,
        env=child_env(database_url),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


class Databases:
    """Throwaway databases: SQLite files in a temporary directory or, with a PostgreSQL
    server URL, databases created on that server (dropped by `close`)."""

    def __init__(self, postgres_url: str | None) -> None:
        self.postgres_url = postgres_url
        self.tmp = tempfile.TemporaryDirectory(prefix="bench_")
        self.created: list[str] = []

    @property
    def vendor(self) -> str:
        return "postgresql" if self.postgres_url else "sqlite"

    def new(self, name: str, *, template: str | None = None) -> str:
        """The URL of a new empty database `name`, or a copy of the database `template`."""
        if self.postgres_url is None:
            path = Path(self.tmp.name) / f"{name}.sqlite3"
            if template is not None:
                path.write_bytes((Path(self.tmp.name) / f"{template}.sqlite3").read_bytes())
            return f"sqlite:///{path}"
        db = self._name(name)
        copy = f' TEMPLATE "{self._name(template)}"' if template else ""
        with _admin(self.postgres_url) as admin:
            admin.execute(f'CREATE DATABASE "{db}"{copy}')
        self.created.append(db)
        return _with_database(self.postgres_url, db)

    def _name(self, name: str) -> str:
        return f"bench_{os.getpid()}_{name}"[:63]

    def close(self) -> None:
        if self.postgres_url is not None and self.created:
            with _admin(self.postgres_url) as admin:
                for db in self.created:
                    admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        self.tmp.cleanup()


def postgres_version(url: str) -> str:
    with _admin(url) as admin:
        return admin.execute("SHOW server_version").fetchone()[0].split()[0]


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


# --- Seeding ---------------------------------------------------------------------------------


def user_create(username: str, *, limit_usd: str | bool | None = False, **auto_memory):
    """A user; `limit_usd` a monthly limit (None: unlimited; False: no quota row, the
    default); `auto_memory` their auto memory settings (a row only when given)."""
    from django.contrib.auth import get_user_model

    from automemory.models import AutoMemorySettings
    from controlplane.models import Quota

    user = get_user_model().objects.create_user(username=username)
    if limit_usd is not False:
        Quota.objects.create(user=user, monthly_limit_usd=limit_usd)
    if auto_memory:
        AutoMemorySettings.objects.create(user=user, **auto_memory)
    return user


def project_create(owner, name: str = "bench", *, members=()):
    """A project `owner` owns, with `members` as members."""
    from controlplane.models import Membership, Project, Role

    project = Project.objects.create(name=name, created_by=owner)
    Membership.objects.create(project=project, user=owner, role=Role.OWNER)
    for user in members:
        Membership.objects.create(project=project, user=user, role=Role.MEMBER)
    return project


def tasks_queue(project, user, count: int, *, prompt: str = "benchmark task {i}") -> list:
    """`count` queued tasks, queued now, in one bulk insert."""
    from django.utils import timezone

    from controlplane.models import Task

    now = timezone.now()
    return Task.objects.bulk_create(
        [
            Task(project=project, user=user, prompt=prompt.format(i=i), queued_at=now)
            for i in range(count)
        ],
        batch_size=1000,
    )


def tasks_completed(
    project,
    user,
    count: int,
    *,
    prompt: Callable[[int], str] | str = "Goal {i}",
    result_text: Callable[[int], str] | str | None = None,
    finished_ago: timedelta = timedelta(hours=2),
    start: int = 0,
) -> list:
    """`count` tasks completed `finished_ago` after a 5-minute run, numbered from `start`;
    `prompt` and `result_text` are format strings of `{i}` or functions of it (the result by
    default long enough for every extraction gate)."""
    from django.utils import timezone

    from controlplane.models import Task

    def text(value, i):
        return value(i) if callable(value) else value.format(i=i)

    finished = timezone.now() - finished_ago
    return Task.objects.bulk_create(
        [
            Task(
                project=project,
                user=user,
                prompt=text(prompt, i),
                status="completed",
                started_at=finished - timedelta(minutes=5),
                finished_at=finished,
                result_text=(text(result_text, i) if result_text else f"Result of task {i}. " * 20),
            )
            for i in range(start, start + count)
        ],
        batch_size=2000,
    )


# --- Timing and query capture ----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Milliseconds of repeated calls. On a busy machine `best` is the steadier figure."""

    median_ms: float
    best_ms: float
    runs: int


def timed(call: Callable[[], object], *, repeats: int, warmup: int = 1) -> Timing:
    """Time `call()` `repeats` times after `warmup` calls."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return Timing(statistics.median(times), min(times), repeats)


@dataclass
class Capture:
    """The statements a block ran (transaction control included, as Django logs it) and the
    time they spent inside the database."""

    statements: list[str] = field(default_factory=list)
    database_seconds: float = 0.0

    @property
    def count(self) -> int:
        return len(self.statements)

    @property
    def database_ms(self) -> float:
        return self.database_seconds * 1000


@contextlib.contextmanager
def captured() -> Iterator[Capture]:
    """Capture the statements run on the default connection inside the block."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    capture = Capture()

    def clock(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            capture.database_seconds += time.perf_counter() - started

    reset_queries()  # Django keeps 9,000 queries at most: a full log would count nothing new
    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(clock):
        yield capture
        capture.statements[:] = [query["sql"] for query in queries.captured_queries]


def statements_of(call: Callable[[], object]) -> int:
    """How many statements `call()` runs."""
    with captured() as capture:
        call()
    return capture.count
