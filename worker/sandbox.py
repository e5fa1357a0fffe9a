"""The agent's world, built from nothing rather than subtracted from the worker's.

Each task gets a room of its own under `WORKER_TASK_ROOT`: `task-<id>/work` (where the agent
works), `home` and `tmp`. The agent starts with an allow-listed environment (`agent_env`):
`PATH`, the locale, `HOME` and `TMPDIR` in its room, what its executor adds (the task's
coordinates, the memory tools' key and address) and the names the operator lists in
`WORKER_AGENT_ENV`; nothing else of the worker's environment (`SECRET_KEY`, `DATABASE_URL`,
`CACHE_URL`, storage keys) reaches it or anything it starts.

With `WORKER_SANDBOX=bwrap` (the default where bubblewrap works) the agent runs in a new
mount, PID, IPC and UTS namespace holding only: the system's programs and libraries
read-only (`/usr` and the few `/etc` files programs need), the worker's Python read-only
(it runs the memory relay), the agent's own program read-only, its room read-write, and
the folders the operator lists in `WORKER_SANDBOX_READ_ONLY` / `WORKER_SANDBOX_WRITABLE`.
Not the control plane's files (`var/`, the SQLite database, `.env`, the settings), not other
tasks' rooms, not the worker's processes (a private `/proc`). With
`WORKER_SANDBOX_NETWORK=isolated` (the default) it also has a network of its own, with only
a loopback interface: it reaches the memory tools and the destinations of
`WORKER_AGENT_EGRESS` through the worker's egress door (`worker/egress.py`, bridged inside by
`worker/netbridge.py`), and nothing else (not the database, the cache or the host's other
services); `host` shares the worker host's network. `none` runs the agent as a plain child
process: the environment is still allow-listed, the files and the network are not hidden.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from worker.egress import egress_gateway

logger = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "none")
NETWORK_MODES = ("isolated", "host")
# Where the egress door's sockets appear inside a sandbox.
EGRESS_MOUNT = "/run/controlplane-egress"
NETBRIDGE = Path(__file__).with_name("netbridge.py")
# What every agent gets of the worker's environment, when the worker has it.
BASE_ENV_NAMES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# Names the control plane's own processes hold secrets in: never handed to an agent, even
# when an operator lists them in WORKER_AGENT_ENV (a system check refuses them).
CONTROL_PLANE_SECRET_NAMES = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "CACHE_URL",
        # The memory model's endpoint and key (a URL may carry a key as well).
        "AUTOMEMORY_OPENAI_BASE_URL",
        "AUTOMEMORY_OPENAI_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "WORKER_CODEX_SESSION_STORAGE",
    }
)
# System folders shown read-only; on a merged-/usr system /bin, /sbin and /lib* are links.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The /etc entries programs need (name service, TLS roots, the loader, time zone, locale).
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "resolv.conf",
    "ssl",
    "timezone",
)


class SandboxUnavailable(RuntimeError):
    """`WORKER_SANDBOX=bwrap` was asked for and bubblewrap cannot start a sandbox here."""


@dataclass(frozen=True)
class TaskRoom:
    """A task's own folders on this host: `work` (the agent's working folder), `home`, `tmp`."""

    root: Path
    work: Path
    home: Path
    tmp: Path


@dataclass(frozen=True)
class TaskCheckout:
    """A task of a project with a repository: its room's `work` folder is the task's
    worktree, whose own `.git` borrows these object folders (the host's mirror of the
    repository and the task's own turns), shown to the agent read-only."""

    objects: tuple[Path, ...]


def task_room(*, task_id: int) -> TaskRoom:
    """The task's room under `WORKER_TASK_ROOT`, created (owner-only) if missing. A later turn
    of the task on this host finds what the earlier ones left there."""
    root = room_root(task_id=task_id)
    room = TaskRoom(root=root, work=root / "work", home=root / "home", tmp=root / "tmp")
    for path in (room.root.parent, room.root, room.work, room.home, room.tmp):
        path.mkdir(mode=0o700, exist_ok=True)
    return room


def room_root(*, task_id: int) -> Path:
    """Where the task's room is (`WORKER_TASK_ROOT/task-<id>`), made or not."""
    return Path(settings.WORKER_TASK_ROOT).resolve() / f"task-{int(task_id)}"


def links_removed(folder: Path) -> int:
    """Remove every symbolic link (and other non-file, non-folder entry) under `folder`, and
    `folder` itself when it is one; how many went. Run on the agent's folders before the
    worker reads or writes in them, once the agent has exited: a link the agent planted
    (`sessions/... -> var/controlplane.sqlite3`) would otherwise make the worker read or write
    through it outside the room."""
    removed = 0
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
        return 1
    for top, folders, files in os.walk(folder, followlinks=False):
        for name in [*folders, *files]:
            path = Path(top) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                path.unlink()
                removed += 1
    return removed


def agent_env(*, room: TaskRoom, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment an agent starts with: the base names and `WORKER_AGENT_ENV`
    taken from the worker's environment, `HOME` and `TMPDIR` in the task's room, then `extra`
    (the executor's own variables). Control-plane secret names never pass."""
    names = [*BASE_ENV_NAMES, *settings.WORKER_AGENT_ENV]
    env = {
        name: os.environ[name]
        for name in names
        if name in os.environ and name not in CONTROL_PLANE_SECRET_NAMES
    }
    env["HOME"] = str(room.home)
    env["TMPDIR"] = str(room.tmp)
    env.update(extra or {})
    return env


def sandbox_mode() -> str:
    """The sandbox agents run in: `bwrap` or `none`. `auto` (the default) is `bwrap` where
    bubblewrap starts a sandbox on this host, else `none` with a warning; an explicit `bwrap`
    that cannot start raises `SandboxUnavailable` (the worker's start-up check says why)."""
    wanted = settings.WORKER_SANDBOX
    if wanted == "none":
        return "none"
    problem = bwrap_problem(settings.WORKER_SANDBOX_BINARY)
    if not problem:
        return "bwrap"
    if wanted == "bwrap":
        raise SandboxUnavailable(problem)
    _warn_unsandboxed(problem)
    return "none"


@functools.cache
def _warn_unsandboxed(problem: str) -> None:
    logger.warning(
        "agents run without a sandbox (WORKER_SANDBOX=auto): %s; install bubblewrap or set "
        "WORKER_SANDBOX=none to say so on purpose",
        problem,
    )


@functools.cache
def bwrap_problem(binary: str) -> str:
    """Why bubblewrap cannot start a sandbox here ("" when it can): tried once per process."""
    path = shutil.which(binary)
    if path is None:
        return f"{binary!r} not found (Debian: apt-get install bubblewrap)"
    probe = [path, *_namespace_args(), "--unshare-net"]
    probe += ["--ro-bind", "/", "/", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=15, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} could not be run: {exc}"
    if done.returncode != 0:
        return f"{path} cannot create namespaces here: {done.stderr.strip()[:300]}"
    return ""


def _namespace_args() -> list[str]:
    return [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]


def sandboxed(
    args: list[str],
    *,
    room: TaskRoom,
    programs: Iterable[str] = (),
    read_only: Iterable[str | Path] = (),
    checkout: TaskCheckout | None = None,
) -> list[str]:
    """`args` as run in the task's sandbox (unchanged with `WORKER_SANDBOX=none`).

    `programs`: the commands the agent is started as (their install folders are shown
    read-only); `read_only`: further paths the executor needs shown; `checkout`: the git
    objects the task's worktree reads (nothing else of the repository cache: not the
    mirror's refs or configuration, not other tasks' objects or worktrees)."""
    if sandbox_mode() == "none":
        return list(args)
    if shutil.which(args[0]) is None:
        # as plain spawning says, rather than bubblewrap's exit status 1 after the fact
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", args[0])
    shown_ro = [*_python_paths(), *read_only, *settings.WORKER_SANDBOX_READ_ONLY]
    if checkout is not None:
        shown_ro += checkout.objects
    for program in programs:
        shown_ro += program_paths(program)
    command = [shutil.which(settings.WORKER_SANDBOX_BINARY) or "bwrap", *_namespace_args()]
    command += _system_binds()
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in _existing(shown_ro):
        command += ["--ro-bind", path, path]
    for path in [room.work, room.home, room.tmp, *_existing(settings.WORKER_SANDBOX_WRITABLE)]:
        command += ["--bind", str(path), str(path)]
    if settings.WORKER_SANDBOX_NETWORK == "isolated":
        gateway = egress_gateway()
        command += ["--unshare-net", "--ro-bind", str(gateway.folder), EGRESS_MOUNT]
        command += ["--ro-bind", str(NETBRIDGE), str(NETBRIDGE)]
        args = [sys.executable, str(NETBRIDGE), EGRESS_MOUNT, "--", *args]
    command += ["--chdir", str(room.work), "--"]
    return command + list(args)


def _system_binds() -> list[str]:
    binds: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            binds += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            binds += ["--ro-bind", path, path]
    for name in ETC_ENTRIES:
        binds += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return binds


def _python_paths() -> list[str]:
    """The worker's Python, read-only: the memory relay runs on it (its virtualenv holds the
    MCP SDK; the project's own files are not shown)."""
    return [sys.prefix, sys.base_prefix]


def program_paths(program: str) -> list[str]:
    """The folders a program needs shown: its install prefix (the folder holding its `bin/`,
    or its own folder), and the same for the file its link points at. Nothing for programs of
    the system's folders, which are shown anyway."""
    found = shutil.which(program)
    if found is None:
        return []
    paths = []
    for path in (Path(found).absolute(), Path(found).resolve()):
        folder = path.parent
        prefix = folder.parent if folder.name == "bin" else folder
        if not _in_system_dirs(prefix):
            paths.append(str(prefix))
    return paths


def command_files(command_line: str) -> list[str]:
    """The absolute paths a command line names (its program, a script): shown read-only to
    the agent that starts it. A folder they need beside them goes in
    `WORKER_SANDBOX_READ_ONLY`."""
    return [part for part in shlex.split(command_line) if os.path.isabs(part)]


def _in_system_dirs(path: Path) -> bool:
    return any(path == Path(top) or Path(top) in path.parents for top in SYSTEM_DIRS)


def _existing(paths: Iterable[str | Path]) -> list[str]:
    """Absolute, existing paths, none inside another (a bind inside a read-only bind cannot
    make its mount point), parents first."""
    found = sorted(
        {os.path.abspath(os.fspath(raw)) for raw in paths if os.path.exists(os.fspath(raw))},
        key=lambda path: (path.count(os.sep), path),
    )
    kept: list[str] = []
    for path in found:
        if not any(path == top or path.startswith(top.rstrip(os.sep) + os.sep) for top in kept):
            kept.append(path)
    return kept
