"""What a repository URL and a branch name may be, decided without touching the network.

URLs: `https://[user@]host[:port]/path`, `ssh://[user@]host[:port]/path`, scp-like
`[user@]host:path`, and `file:///path` only inside a folder of `REPOSITORY_FILE_ROOTS`. Never
a password in the URL (the credential has a field of its own), never the control plane's own
files (its code, its SQLite database, the workers' task roots and repository cache) nor its
database's or cache's address. Branch names follow `git check-ref-format --branch`; the
`controlplane/` prefix is the task branches' own.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings

URL_MAX_CHARS = 2048
BRANCH_MAX_CHARS = 255
TASK_BRANCH_PREFIX = "controlplane/"
SCHEMES = {"https": 443, "ssh": 22}
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_USER = re.compile(r"^[A-Za-z0-9._~+-]{1,100}$")
_SCP = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@/:\[\]]+):(?P<path>.+)$")
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class RepositoryUrlError(ValueError):
    """The URL may not be used; the message says why, for the `url` field."""


@dataclass(frozen=True)
class RemoteUrl:
    """A URL that passed the checks: how git is to reach it."""

    url: str
    kind: str  # https | ssh | file
    host: str = ""
    port: int | None = None
    username: str = ""
    path: str = ""


def remote_url_parse(text: str) -> RemoteUrl:
    """`text` as a usable remote; RepositoryUrlError (with the reason) when it is not."""
    if not isinstance(text, str) or not text:
        raise RepositoryUrlError("A URL is required.")
    if len(text) > URL_MAX_CHARS:
        raise RepositoryUrlError(f"At most {URL_MAX_CHARS} characters.")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise RepositoryUrlError("A URL holds no spaces or control characters.")
    if re.match(r"^[A-Za-z0-9+.-]*::", text):
        raise _unsupported()  # git's `<helper>::<address>` form runs a remote helper
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme == "file":
            return _file_url(text)
        if scheme not in SCHEMES:
            raise _unsupported()
        return _network_url(text, scheme)
    match = _SCP.match(text)
    if match is None or text.startswith(("/", ".", "~")):
        raise _unsupported()
    user, host, path = match.group("user") or "", match.group("host"), match.group("path")
    _check_host(host.strip("[]"))
    _check_user(user)
    if path.startswith("-"):
        raise RepositoryUrlError("The path may not start with '-'.")
    remote = RemoteUrl(
        url=text, kind="ssh", host=host.strip("[]").lower(), port=22, username=user, path=path
    )
    _check_not_control_plane_address(remote)
    return remote


def _unsupported() -> RepositoryUrlError:
    return RepositoryUrlError(
        "Use https://HOST/PATH, ssh://[USER@]HOST/PATH, USER@HOST:PATH, or file:///PATH inside "
        "a folder of REPOSITORY_FILE_ROOTS."
    )


def _network_url(text: str, scheme: str) -> RemoteUrl:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise RepositoryUrlError(f"Not a valid URL: {exc}.") from None
    if parts.password is not None:
        raise RepositoryUrlError(
            "No password or token in the URL: send it as `credential` (stored encrypted)."
        )
    if parts.query or parts.fragment:
        raise RepositoryUrlError("No query or fragment in a repository URL.")
    host = parts.hostname or ""
    _check_host(host)
    username = unquote(parts.username or "")
    _check_user(username)
    path = unquote(parts.path)
    if not path.strip("/"):
        raise RepositoryUrlError("The URL names no repository path.")
    if path.startswith("/-") or "\\" in path:
        raise RepositoryUrlError("The path may not start with '-' or hold backslashes.")
    remote = RemoteUrl(
        url=text,
        kind=scheme,
        host=host.lower(),
        port=port or SCHEMES[scheme],
        username=username,
        path=path,
    )
    _check_not_control_plane_address(remote)
    return remote


def _check_host(host: str) -> None:
    if not host:
        raise RepositoryUrlError("The URL names no host.")
    if host.startswith("-"):
        raise RepositoryUrlError("A host may not start with '-'.")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if len(host) > 253 or not _HOST.match(host):
        raise RepositoryUrlError(f"{host!r} is not a valid host name.")


def _check_user(user: str) -> None:
    if user and (user.startswith("-") or not _USER.match(user)):
        raise RepositoryUrlError("The user name may hold letters, digits and ._~+- only.")


def _file_url(text: str) -> RemoteUrl:
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise RepositoryUrlError(f"Not a valid URL: {exc}.") from None
    if parts.netloc not in ("", "localhost"):
        raise RepositoryUrlError("A file:// URL names a local path: file:///PATH.")
    if parts.query or parts.fragment:
        raise RepositoryUrlError("No query or fragment in a repository URL.")
    path = unquote(parts.path)
    if not path.startswith("/") or "\x00" in path:
        raise RepositoryUrlError("A file:// URL needs an absolute path.")
    problem = file_path_problem(path)
    if problem:
        raise RepositoryUrlError(problem)
    return RemoteUrl(url=f"file://{parts.path}", kind="file", path=path)


def file_path_problem(path: str) -> str:
    """Why a local repository path may not be used ("" when it may): outside every folder
    of REPOSITORY_FILE_ROOTS, or inside (or around) the control plane's own files. Links are
    resolved first, so a link planted inside a root does not lead out of it. The worker asks
    again before every fetch."""
    real = Path(os.path.realpath(path))
    roots = [Path(os.path.realpath(root)) for root in settings.REPOSITORY_FILE_ROOTS if root]
    if not any(real == root or root in real.parents for root in roots):
        return (
            "file:// repositories must be inside a folder of REPOSITORY_FILE_ROOTS"
            + (f" ({', '.join(str(r) for r in roots)})" if roots else " (none is set)")
            + "."
        )
    for own in control_plane_paths():
        if real == own or own in real.parents or real in own.parents:
            return "This path is the control plane's own files; it cannot be a repository."
    return ""


def control_plane_paths() -> list[Path]:
    """The folders and files that are the control plane's own: its code, its SQLite
    database file, the workers' task roots and repository cache, static files."""
    paths = [settings.BASE_DIR, settings.WORKER_TASK_ROOT, settings.WORKER_REPO_CACHE]
    paths.append(getattr(settings, "STATIC_ROOT", None))
    for database in settings.DATABASES.values():
        if database.get("ENGINE", "").endswith("sqlite3") and database.get("NAME"):
            paths.append(Path(str(database["NAME"])))
    return [Path(os.path.realpath(str(path))) for path in paths if path]


def _check_not_control_plane_address(remote: RemoteUrl) -> None:
    for host, port in _control_plane_addresses():
        if port == remote.port and _same_host(host, remote.host):
            raise RepositoryUrlError("This address is the control plane's own database or cache.")


def _control_plane_addresses() -> list[tuple[str, int]]:
    found = []
    for database in settings.DATABASES.values():
        host = str(database.get("HOST") or "")
        if host and not host.startswith("/"):
            found.append((host, int(database.get("PORT") or 5432)))
    for cache in settings.CACHES.values():
        locations = cache.get("LOCATION") or []
        for location in [locations] if isinstance(locations, str) else locations:
            parts = urlsplit(str(location)) if "://" in str(location) else None
            try:
                if parts is not None and parts.hostname and parts.port:
                    found.append((parts.hostname, parts.port))
            except ValueError:
                continue
    return found


def _same_host(a: str, b: str) -> bool:
    a, b = a.strip("[]").lower(), b.strip("[]").lower()
    return a == b or (_is_loopback(a) and _is_loopback(b))


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


# --- Branch names ---------------------------------------------------------------------------

_BRANCH_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def branch_name_problem(name: str, *, task_branches: bool = False) -> str:
    """Why `name` is not a branch name git accepts ("" when it is), as `git check-ref-format
    --branch` decides; `controlplane/...` names are refused unless `task_branches`."""
    if not name:
        return "A branch name is required."
    if len(name) > BRANCH_MAX_CHARS:
        return f"At most {BRANCH_MAX_CHARS} characters."
    if _BRANCH_FORBIDDEN.search(name):
        return "A branch name holds no spaces, control characters or any of ~ ^ : ? * [ \\."
    if name.startswith(("-", "/")) or name.endswith(("/", ".")) or name == "@" or name == "HEAD":
        return "Not a valid branch name."
    if ".." in name or "//" in name or "@{" in name:
        return "A branch name holds no '..', '//' or '@{'."
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            return "No part of a branch name starts with '.' or ends with '.lock'."
    if not task_branches and name.startswith(TASK_BRANCH_PREFIX):
        return f"Branches under {TASK_BRANCH_PREFIX} are the tasks' own."
    return ""


def task_branch_name(task_id: int) -> str:
    """The branch a task's turns are committed to."""
    return f"{TASK_BRANCH_PREFIX}task-{int(task_id)}"
