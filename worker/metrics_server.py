"""A worker's own Prometheus endpoint (`WORKER_METRICS_PORT`), so a worker host needs no API
process to be scraped.

It serves this process's counters (`worker_*`, `automemory_*`, and prometheus_client's
`process_*` and `python_*`) under the same names as an API process's `/metrics`, behind the
same rules (`METRICS_ALLOWED_IPS`, `METRICS_BEARER_TOKEN`; the port itself turns it on). Not
the queue gauges: those are the database's, and every API process reports them. A small
threaded WSGI server on its own daemon thread; it never touches the database.
"""

from __future__ import annotations

import logging
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST

from controlplane.metrics import metrics_access_problem, process_counters_scrape

logger = logging.getLogger(__name__)


def metrics_app(environ: dict, start_response) -> list[bytes]:
    """WSGI: `GET /metrics` (or HEAD) answers the counters; anything else 404 or 405."""
    if environ.get("PATH_INFO") != "/metrics":
        return _answer(start_response, 404, "Not found\n")
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return _answer(start_response, 405, "Method not allowed\n", [("Allow", "GET, HEAD")])
    problem = metrics_access_problem(
        remote_addr=environ.get("REMOTE_ADDR", ""),
        authorization=environ.get("HTTP_AUTHORIZATION", ""),
        enabled=True,  # a worker serves metrics when it has a WORKER_METRICS_PORT
    )
    if problem is not None:
        status, text = problem
        extra = [("WWW-Authenticate", 'Bearer realm="metrics"')] if status == 401 else []
        return _answer(start_response, status, text, extra)
    body = process_counters_scrape()
    start_response(
        "200 OK",
        [
            ("Content-Type", CONTENT_TYPE_LATEST),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]


_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed"}


def _answer(start_response, status: int, text: str, headers: list | None = None) -> list[bytes]:
    body = text.encode()
    start_response(
        f"{status} {_REASONS[status]}",
        [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), *(headers or [])],
    )
    return [body]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # scrapes are not worth a log line
        pass


class MetricsServer:
    """`start()` listens on (addr, port) (port 0: any free one) and returns the bound port."""

    def __init__(self, *, port: int, addr: str = "0.0.0.0") -> None:
        self.port = port
        self.addr = addr
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        self._server = make_server(
            self.addr, self.port, metrics_app, _ThreadingServer, handler_class=_QuietHandler
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="worker-metrics", daemon=True
        )
        self._thread.start()
        logger.info("serving worker metrics on http://%s:%s/metrics", self.addr, self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
