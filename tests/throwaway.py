"""Throwaway servers for the fault tests: a PostgreSQL cluster and a Redis server of their
own, on free ports in a temporary directory, that a test may stop and start at will.

Never the machine's own servers: each is made by `initdb` / started by `redis-server` here,
and removed at the end. PostgreSQL refuses to run as root, so under root the cluster is
made and run as the `postgres` OS user (its directory handed to that user).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def tool_missing(reason: str) -> None:
    """Skip a fault test whose server binaries are absent; in CI (`CI` set), fail instead:
    CI must run them."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"CI must run the fault tests: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, *, up: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            reachable = True
        except OSError:
            reachable = False
        if reachable == up:
            return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} still {'closed' if up else 'open'} after {timeout}s")


def postgres_bin_dir() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian's layout), or None."""
    found = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class ThrowawayPostgres:
    """A PostgreSQL cluster of its own: `start()`, `stop()` (fast shutdown: sessions are cut,
    as in a restart), `start()` again, `destroy()`. Trust authentication, user postgres."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="throwaway-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as: dict = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    def _run(self, *argv: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [str(self.bin_dir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.dir,
            **self._as,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")

    def init(self) -> ThrowawayPostgres:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")  # fmt: skip
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        _wait_port(self.port, up=False, timeout=10)

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def settings_dict(self, base: dict, name: str) -> dict:
        """A Django database entry for database `name` of this cluster, else like `base`."""
        return {
            **base,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "USER": "postgres",
            "PASSWORD": "",
            "NAME": name,
            "TEST": {"NAME": name},
        }

    def copy_database(self, *, source_url: str, name: str) -> None:
        """Database `name` here, as a copy of the database at `source_url` (schema and rows)."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        dump = subprocess.run(
            [str(self.bin_dir / "pg_dump"), "--no-owner", "--no-privileges", source_url],
            capture_output=True,
            timeout=120,
            check=True,
        )
        load = subprocess.run(
            [str(self.bin_dir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", self.url(name)],
            input=dump.stdout,
            capture_output=True,
            timeout=120,
        )
        if load.returncode != 0:
            raise RuntimeError(f"loading the copy failed: {load.stderr.decode()[-2000:]}")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class ThrowawayRedis:
    """A `redis-server` of its own, without persistence: `start()`, `stop()`, `start()`."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="throwaway-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, up=True, timeout=20)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)
        self.process = None
        _wait_port(self.port, up=False, timeout=10)

    def destroy(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
