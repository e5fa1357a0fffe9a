"""The agent's only way out of its sandbox's network: the destinations the operator allows.

With `WORKER_SANDBOX_NETWORK=isolated` (the default under bubblewrap) an agent runs in a
network namespace of its own, with nothing but its own loopback interface: no route to the
database, the cache, the worker host's other services or the internet. This module is the
worker's side of the one door: a folder of Unix sockets, bound read-only into every sandbox
(`worker/sandbox.py`), that the in-sandbox bridge (`worker/netbridge.py`) connects to.

- `port-<N>.sock`: a loopback destination the agent may reach (the memory tools' API on this
  host, a loopback `WORKER_AGENT_EGRESS` entry): the bridge listens on `127.0.0.1:N` inside
  the sandbox, and each connection is passed through to `127.0.0.1:N` outside.
- `proxy.sock`: an HTTP proxy for the other destinations: `CONNECT host:port` (HTTPS and any
  TLS client) and absolute-form plain HTTP requests, each refused with a 403 unless its
  `host:port` is allowed. The bridge points `HTTPS_PROXY`/`HTTP_PROXY` at it; names are
  resolved out here, so the agent needs no DNS.

Allowed: `WORKER_AGENT_EGRESS` (`host:port` entries; by default the OpenAI API, which the
codex CLI talks to) and the memory tools' address (`WORKER_MEMORY_API_URL`). One gateway per
worker process, started with the first sandboxed agent; it serves every task's agents (each
agent's key, not the network, says what it may read).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from worker import metrics

logger = logging.getLogger(__name__)

PROXY_SOCKET = "proxy.sock"
# A proxy request's head (request line and headers) may be this long at the most.
MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 15.0
CHUNK = 64 * 1024
# Headers a proxy consumes: not passed on to the destination.
HOP_HEADERS = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "te", "upgrade"}
)


@dataclass(frozen=True)
class Destination:
    """A `host:port` an agent may reach; `host` lower-cased, IPv6 without brackets."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def destination_parse(text: str, *, default_port: int | None = None) -> Destination:
    """`host:port` (`[v6]:port`; the port may be left out when `default_port` is given) as a
    `Destination`; ValueError saying why when it is not one."""
    text = text.strip()
    if not text or any(ch.isspace() for ch in text) or "/" in text or "@" in text:
        raise ValueError(f"{text!r} is not host:port")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [host]:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" not in text:
        host, port_text = text, ""
    else:
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets, [::1]:443")
    if not port_text:
        if default_port is None:
            raise ValueError(f"{text!r} has no port")
        port = default_port
    else:
        if not port_text.isdigit():
            raise ValueError(f"{text!r}: the port is not a number")
        port = int(port_text)
    if not host or not 0 < port < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return Destination(host=host.lower().rstrip("."), port=port)


def url_destination(url: str) -> Destination | None:
    """The `host:port` an http(s) URL names (None for anything else)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return Destination(
        host=parts.hostname.lower().rstrip("."),
        port=port or (443 if parts.scheme == "https" else 80),
    )


def allowed_destinations() -> frozenset[Destination]:
    """What agents may reach: `WORKER_AGENT_EGRESS` and the memory tools' address."""
    allowed = {destination_parse(entry) for entry in settings.WORKER_AGENT_EGRESS}
    memory = url_destination(settings.WORKER_MEMORY_API_URL)
    if memory is not None and settings.WORKER_MEMORY_TOOLS:
        allowed.add(memory)
    return frozenset(allowed)


class EgressGateway:
    """The worker's side of the agents' door: Unix sockets served by one event loop in a
    daemon thread. `folder` holds the sockets; `close()` stops serving and removes it."""

    def __init__(self, allowed: Iterable[Destination]) -> None:
        self.allowed = frozenset(allowed)
        self.folder = Path(tempfile.mkdtemp(prefix="cp-egress-"))
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="agent-egress", daemon=True
        )
        self._thread.start()
        ready.wait()
        future = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        future.result(timeout=10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        self._loop.run_forever()

    async def _serve(self) -> None:
        ports = sorted({d.port for d in self.allowed if d.loopback})
        for port in ports:
            server = await asyncio.start_unix_server(
                lambda r, w, port=port: self._pass_through(r, w, port),
                path=str(self.folder / f"port-{port}.sock"),
            )
            self._servers.append(server)
        if any(not d.loopback for d in self.allowed):
            server = await asyncio.start_unix_server(
                self._proxy, path=str(self.folder / PROXY_SOCKET), limit=MAX_HEAD_BYTES
            )
            self._servers.append(server)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)

    async def _pass_through(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port), CONNECT_TIMEOUT_SECONDS
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        await _pipe_both(reader, writer, up_reader, up_writer)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        request = _ProxyRequest.parse(head)
        if request is None:
            await _answer(writer, 400, "Bad Request", "not an HTTP proxy request")
            return
        if request.destination not in self.allowed:
            metrics.agent_egress_refused.inc()
            logger.warning(
                "an agent's connection to %s was refused: not in WORKER_AGENT_EGRESS",
                request.destination,
            )
            await _answer(
                writer,
                403,
                "Forbidden",
                f"the sandbox does not reach {request.destination} (WORKER_AGENT_EGRESS)",
            )
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(request.destination.host, request.destination.port),
                CONNECT_TIMEOUT_SECONDS,
            )
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, "Bad Gateway", f"{request.destination}: {exc}")
            return
        if request.method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        else:
            up_writer.write(request.origin_form_head())
        await _pipe_both(reader, writer, up_reader, up_writer)


@dataclass(frozen=True)
class _ProxyRequest:
    method: str
    destination: Destination
    target: str  # the origin-form path and query of a plain HTTP request
    version: str
    headers: list[tuple[str, str]]

    @classmethod
    def parse(cls, head: bytes) -> _ProxyRequest | None:
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
        except ValueError:
            return None
        if not version.startswith("HTTP/1.") or not method.isalpha():
            return None
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                return None
            headers.append((name, value.strip()))
        if method.upper() == "CONNECT":
            try:
                destination = destination_parse(target)
            except ValueError:
                return None
            return cls("CONNECT", destination, "", version, headers)
        if not target.lower().startswith("http://"):
            return None  # https goes through CONNECT; origin-form is not a proxy request
        destination = url_destination(target)
        if destination is None:
            return None
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(method, destination, path, version, headers)

    def origin_form_head(self) -> bytes:
        """The request as its destination takes it: origin-form, the proxy's own headers
        removed, and `Connection: close` so that one connection serves one destination."""
        lines = [f"{self.method} {self.target} {self.version}"]
        lines += [f"{n}: {v}" for n, v in self.headers if n.lower() not in HOP_HEADERS]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str, text: str) -> None:
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then half-close the other side (a client that
    sent its whole request still reads the answer)."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()  # the other direction ends with it


_gateway: EgressGateway | None = None
_gateway_lock = threading.Lock()


def egress_gateway() -> EgressGateway:
    """This process's gateway, started on first use (and again when the allowed destinations
    changed, as tests change settings); removed when the process exits."""
    global _gateway
    allowed = allowed_destinations()
    with _gateway_lock:
        if _gateway is None or _gateway.allowed != allowed or not _gateway.folder.exists():
            if _gateway is not None:
                _gateway.close()
            _gateway = EgressGateway(allowed)
        return _gateway


@atexit.register
def _close_gateway() -> None:
    if _gateway is not None and _gateway.folder.exists():
        shutil.rmtree(_gateway.folder, ignore_errors=True)
