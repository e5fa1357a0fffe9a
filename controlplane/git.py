"""The real `git` binary, run so that nothing but what the caller asks for can happen.

Why the binary and not a binding (pygit2, dulwich): it speaks every transport (smart HTTP
with any auth a server asks for, ssh through the system's OpenSSH, bundles) exactly as the
hosts our users push to expect, it is what `apt-get install git` gives every worker host, and
its safety switches for untrusted repositories (protocol allow-lists, no hooks, no
fsmonitor, no config outside the repository) are documented and maintained upstream;
pygit2 would add libgit2's own transport and credential stack to get the same.

Every command runs:
- with an environment built from nothing: PATH, the C locale, a private HOME, the proxy and
  CA names git needs, and `WORKER_GIT_ENV`; never the worker's secrets;
- with no system or global configuration, no hooks, no fsmonitor, no credential helper, no
  terminal prompt, no redirects, and only the https, ssh and file transports;
- in its own process group, killed whole at its timeout or when the folder it writes grows
  past the caller's limit;
- with its output bounded (the caller says how much it keeps) and every secret it was
  given replaced in what it says.

A credential reaches git through a file only this user can read, named by `GIT_ASKPASS`
(https) or by `GIT_SSH_COMMAND`'s `-i` (ssh): never on a command line, never in the URL.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from controlplane.repository_urls import RemoteUrl

# What git gets of the worker's environment besides WORKER_GIT_ENV (when set there).
BASE_ENV_NAMES = (
    "PATH",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
# Configuration given on every command line (nothing of it is secret): what an untrusted
# repository could otherwise make git do.
SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.quotePath=false",
    "credential.helper=",
    "http.followRedirects=false",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.file.allow=always",
    "submodule.recurse=false",
    "advice.detachedHead=false",
)
ALLOWED_PROTOCOLS = "https:ssh:file"
STDERR_KEEP_BYTES = 8192
REDACTED = "[REDACTED]"
USERNAME_ENV = "CONTROLPLANE_GIT_USERNAME"
SECRET_FILE_ENV = "CONTROLPLANE_GIT_SECRET_FILE"
ASKPASS_SCRIPT = f"""#!/bin/sh
# git's GIT_ASKPASS: the user name from the environment, the secret from a file only the
# worker's user can read (its path in the environment, never the secret itself).
case "$1" in
  Username*) printf '%s\\n' "${USERNAME_ENV}" ;;
  *) cat "${SECRET_FILE_ENV}" ;;
esac
"""


class GitError(Exception):
    """A git command failed; `str()` says what failed in git's own words (secrets out)."""

    def __init__(self, message: str, *, stderr: str = "", returncode: int | None = None):
        super().__init__(message)
        self.stderr = stderr
        self.returncode = returncode


class GitTimeout(GitError):
    """The command ran past its timeout and was killed."""


class GitSizeExceeded(GitError):
    """The folder the command wrote grew past its limit and the command was killed."""


@dataclass(frozen=True)
class GitResult:
    stdout: bytes
    stderr: str
    # The whole output's size, and whether `stdout` holds only its first `max_stdout` bytes.
    stdout_bytes: int = 0
    truncated: bool = False
    returncode: int = 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace").strip()


@dataclass(frozen=True)
class Remote:
    """A remote git may reach, and the credential it reaches it with (kept out of reprs)."""

    url: RemoteUrl
    credential: str = field(default="", repr=False)


def private_dir() -> Path:
    """A folder only the worker's user can enter: git's HOME, the askpass script, the
    credential files while a command runs, ssh's known hosts."""
    path = Path(settings.WORKER_REPO_CACHE).resolve() / "private"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _askpass_script(folder: Path) -> Path:
    script = folder / "askpass.sh"
    if not script.is_file() or script.read_text() != ASKPASS_SCRIPT:
        descriptor, temporary = tempfile.mkstemp(dir=folder)
        with os.fdopen(descriptor, "w") as out:
            out.write(ASKPASS_SCRIPT)
        os.chmod(temporary, 0o700)
        os.replace(temporary, script)
    return script


def ssh_command(folder: Path, key_file: Path | None = None) -> str:
    """ssh as git runs it: no user or system ssh configuration, no agent, no prompts, the
    host's key learnt on first use into the worker's own known-hosts file."""
    args = [
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        f"UserKnownHostsFile={folder / 'known_hosts'}",
    ]
    if key_file is not None:
        args += ["-i", str(key_file)]
    return shlex.join(args)


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment a git command gets."""
    folder = private_dir()
    names = [*BASE_ENV_NAMES, *settings.WORKER_GIT_ENV]
    env = {name: os.environ[name] for name in names if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        LC_ALL="C",
        LANG="C",
        HOME=str(folder),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS,
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_SSH_COMMAND=ssh_command(folder),
        GIT_AUTHOR_NAME="controlplane",
        GIT_AUTHOR_EMAIL="controlplane@localhost",
        GIT_COMMITTER_NAME="controlplane",
        GIT_COMMITTER_EMAIL="controlplane@localhost",
    )
    env.update(extra or {})
    return env


@contextlib.contextmanager
def remote_env(remote: Remote) -> Iterator[dict[str, str]]:
    """The environment that lets git reach `remote` with its credential, for the block's
    length: the credential written to a file only this user can read, removed after."""
    if not remote.credential:
        yield {}
        return
    folder = private_dir()
    descriptor, secret_path = tempfile.mkstemp(dir=folder, prefix="credential-")
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(remote.credential)
            if remote.url.kind == "ssh" and not remote.credential.endswith("\n"):
                out.write("\n")  # OpenSSH refuses a key file without its final new line
        if remote.url.kind == "ssh":
            yield {"GIT_SSH_COMMAND": ssh_command(folder, Path(secret_path))}
        else:
            yield {
                "GIT_ASKPASS": str(_askpass_script(folder)),
                SECRET_FILE_ENV: secret_path,
                USERNAME_ENV: remote.url.username or "x-access-token",
            }
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(secret_path)


def folder_size(path: Path) -> int:
    """Bytes of disk the files under `path` take (links not followed)."""
    total = 0
    for top, folders, files in os.walk(path, followlinks=False):
        for name in (*folders, *files):
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret (and each line of a multi-line one) replaced."""
    for secret in secrets:
        if not secret:
            continue
        for piece in [secret, *secret.splitlines()]:
            if len(piece.strip()) >= 4:
                text = text.replace(piece.strip(), REDACTED)
    return text


def git_run(
    args: Sequence[str],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    input_bytes: bytes | None = None,
    max_stdout: int | None = None,
    size_limit: tuple[Path, int] | None = None,
    secrets: Sequence[str] = (),
    check: bool = True,
) -> GitResult:
    """Run `git <args>` as this module's docstring says; GitError (GitTimeout,
    GitSizeExceeded) when it fails, its message what git said, every secret replaced.

    `env`: added to `git_env()` (a repository's GIT_DIR, a remote's credential);
    `max_stdout`: keep only that many bytes of the output (the rest is counted, not kept);
    `size_limit`: `(folder, bytes)`, the command is killed when the folder grows past it."""
    command = [settings.WORKER_GIT_BINARY]
    for option in SAFE_CONFIG:
        command += ["-c", option]
    command += list(args)
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=git_env(env),
        stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    kept = bytearray()
    counted = [0]
    stderr_tail = bytearray()

    def read_stdout() -> None:
        for chunk in iter(lambda: process.stdout.read(65536), b""):
            counted[0] += len(chunk)
            if max_stdout is None or len(kept) < max_stdout:
                room = len(chunk) if max_stdout is None else max_stdout - len(kept)
                kept.extend(chunk[:room])

    def read_stderr() -> None:
        for chunk in iter(lambda: process.stderr.read(4096), b""):
            stderr_tail.extend(chunk)
            del stderr_tail[:-STDERR_KEEP_BYTES]

    readers = [threading.Thread(target=read_stdout), threading.Thread(target=read_stderr)]
    for reader in readers:
        reader.daemon = True
        reader.start()
    if input_bytes is not None:
        with contextlib.suppress(BrokenPipeError, OSError):
            process.stdin.write(input_bytes)
            process.stdin.close()
    oversize = _watch_size(process, size_limit) if size_limit else None
    try:
        returncode = process.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill(process)
        returncode = process.wait()
        timed_out = True
    for reader in readers:
        reader.join(timeout=10)
    stderr = redact(stderr_tail.decode("utf-8", errors="replace").strip(), secrets)
    what = " ".join(a for a in args if not a.startswith("-"))[:120] or "git"
    if oversize is not None and oversize.is_set():
        folder, limit = size_limit
        raise GitSizeExceeded(
            f"git {args[0]} was stopped: {folder} grew past {limit} bytes", stderr=stderr
        )
    if timed_out:
        raise GitTimeout(f"git {args[0]} timed out after {timeout:g}s", stderr=stderr)
    if check and returncode != 0:
        said = _last_lines(stderr) or f"exit status {returncode}"
        raise GitError(f"git {what}: {said}", stderr=stderr, returncode=returncode)
    return GitResult(
        stdout=bytes(kept),
        stderr=stderr,
        stdout_bytes=counted[0],
        truncated=max_stdout is not None and counted[0] > len(kept),
        returncode=returncode,
    )


def _last_lines(stderr: str, count: int = 3) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " / ".join(lines[-count:])[:1000]


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _watch_size(process: subprocess.Popen, size_limit: tuple[Path, int]) -> threading.Event:
    folder, limit = size_limit
    exceeded = threading.Event()

    def watch() -> None:
        while process.poll() is None:
            if folder_size(folder) > limit:
                exceeded.set()
                _kill(process)
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    return exceeded
