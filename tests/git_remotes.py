"""Real git remotes for the tests, on this machine: bare repositories built with the real
`git` (a file:// URL), and the same served over git's smart HTTP (`git http-backend`) behind
a real HTTPS server on 127.0.0.1 that asks for a credential.

Nothing here stands in for git: the helpers only run it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

GIT = shutil.which("git")
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
    "LC_ALL": "C",
}


def git_or_skip() -> str:
    if GIT is None:
        if os.environ.get("CI"):
            pytest.fail("git is not installed (required in CI)")
        pytest.skip("git is not installed")
    return GIT


def git(*args: str, cwd: Path | None = None, input: bytes | None = None, env=None) -> str:
    """Run the real git as a person would (no global configuration); its output."""
    done = subprocess.run(
        [GIT, *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env={"PATH": os.environ["PATH"], "HOME": str(cwd or "/tmp"), **GIT_ENV, **(env or {})},
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout.decode("utf-8", errors="replace").strip()


@dataclass
class BareRemote:
    """A bare repository and a working clone to change it with."""

    path: Path
    work: Path

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def commit(
        self, files: dict[str, bytes | str | None], message: str = "change", *, branch="main"
    ) -> str:
        """Write (None: delete) files in the working clone, commit and push `branch`; the
        new commit."""
        git("checkout", "-q", "-B", branch, cwd=self.work)
        for name, content in files.items():
            target = self.work / name
            if content is None:
                git("rm", "-q", "-r", "--", name, cwd=self.work)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                content = content.encode()
            target.write_bytes(content)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work)
        git("push", "-q", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def force_push_new_history(self, files: dict[str, str], branch: str = "main") -> str:
        """Replace `branch` on the remote by one new root commit holding only `files` (the
        old history unreachable there, and pruned); the new commit."""
        git("checkout", "-q", "--orphan", f"rewritten-{branch}", cwd=self.work)
        git("rm", "-rqf", "--ignore-unmatch", ".", cwd=self.work)
        for name, content in files.items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(content)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", "new history", cwd=self.work)
        git("push", "-q", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=self.work)
        git("gc", "-q", "--prune=now", cwd=self.path)
        return git("rev-parse", "HEAD", cwd=self.work)

    def head(self, branch: str = "main") -> str:
        return git("rev-parse", f"refs/heads/{branch}", cwd=self.path)

    def branches(self) -> list[str]:
        out = git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=self.path)
        return out.splitlines()

    def show(self, revision: str, path: str) -> str:
        return git("show", f"{revision}:{path}", cwd=self.path)


def bare_remote(folder: Path, files: dict[str, bytes | str] | None = None) -> BareRemote:
    """A bare repository at `folder/remote.git` whose `main` holds `files` (one commit)."""
    git_or_skip()
    path = folder / "remote.git"
    work = folder / "author"
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    git("clone", "-q", str(path), str(work))
    remote = BareRemote(path=path, work=work)
    remote.commit(files or {"README.md": "# Demo\n\nHello.\n"}, "first commit")
    return remote


# --- Smart HTTP over TLS ----------------------------------------------------------------------


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (made with `cryptography`): (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class SmartHttpServer:
    """`git http-backend` behind an HTTPS server on 127.0.0.1, serving the bare repositories
    under `root`. Every request needs Basic auth with a user of `users` (name -> (password,
    may push)); it records each request's path, user and status."""

    root: Path
    users: dict[str, tuple[str, bool]]
    cert: Path
    key: Path
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    authorization_headers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        import ssl

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, name: str, user: str = "git") -> str:
        return f"https://{user}@127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> SmartHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _user(self) -> tuple[str, bool] | None:
                header = self.headers.get("Authorization", "")
                server.authorization_headers.append(header)
                if not header.startswith("Basic "):
                    return None
                try:
                    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    return None
                known = server.users.get(user)
                if known is None or known[0] != password:
                    return None
                return user, known[1]

            def _refuse(self, status: int, message: str) -> None:
                body = message.encode()
                self.send_response(status)
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return bytes(data)
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _cgi(self) -> None:
                path, _, query = self.path.partition("?")
                user = self._user()
                if user is None:
                    server.requests.append((path, "", 401))
                    self._refuse(401, "authentication required")
                    return
                name, may_push = user
                if ("git-receive-pack" in path or "git-receive-pack" in query) and not may_push:
                    server.requests.append((path, name, 403))
                    self._refuse(403, f"{name} may not push")
                    return
                body = self._body() if self.command == "POST" else b""
                env = {
                    "PATH": os.environ["PATH"],
                    "GIT_PROJECT_ROOT": str(server.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": os.devnull,
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "REMOTE_USER": name,
                    "REMOTE_ADDR": "127.0.0.1",
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                }
                done = subprocess.run(
                    [GIT, "http-backend"], input=body, capture_output=True, env=env, check=False
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode(errors="replace").split("\r\n"):
                    key, _, value = line.partition(":")
                    if key.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif key:
                        headers.append((key, value.strip()))
                server.requests.append((path, name, status))
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
