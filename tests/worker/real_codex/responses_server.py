"""A local fake of the OpenAI Responses API for the real `codex` CLI: real HTTP, SSE replies.

Listens on 127.0.0.1 on an ephemeral port. Each `POST .../responses` takes the next scripted
`Reply` (or a plain text answer when none is left), streams it as server-sent events
(`response.created`, one `response.output_item.done` per output item, `response.completed`
with `usage`) and records the request with the usage it reported, so tests can compare what
the worker billed with what the model server was asked for.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One model response: output items and usage, or an HTTP error, or no answer at all."""

    items: tuple[dict[str, Any], ...] = ()
    input_tokens: int | None = None  # None: a quarter of the request body's size
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 40
    reasoning_tokens: int = 0
    status: int = 200
    error_message: str = ""
    hang: bool = False


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def mcp_tool_call(
    server: str, tool: str, arguments: dict[str, Any], call_id: str
) -> dict[str, Any]:
    """A call of an MCP tool (codex offers a server's tools in a `mcp__<server>` namespace)."""
    return {
        "type": "function_call",
        "namespace": f"mcp__{server}",
        "name": tool,
        "arguments": json.dumps(arguments),
        "call_id": call_id,
    }


def web_search_call(query: str) -> dict[str, Any]:
    return {
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": query},
    }


@dataclass
class RecordedRequest:
    path: str
    body: dict[str, Any]
    status: int
    usage: dict[str, int] = field(default_factory=dict)


class ResponsesServer:
    """Start with `with ResponsesServer() as server:`; `server.base_url` goes in the config."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def model_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/responses")]

    def __enter__(self) -> ResponsesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def _next_reply(self) -> Reply:
        with self._lock:
            return self.replies.popleft() if self.replies else Reply(items=(message("ok"),))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                # model lists and the like: nothing here
                self._send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if not self.path.endswith("/responses"):
                    with server._lock:
                        server.requests.append(RecordedRequest(self.path, body, 404))
                    self._send_json(404, {"error": {"message": "not found"}})
                    return
                reply = server._next_reply()
                record = RecordedRequest(self.path, body, reply.status)
                with server._lock:
                    server.requests.append(record)
                if reply.hang:
                    server._release.wait()
                    return
                if reply.status != 200:
                    self._send_json(
                        reply.status,
                        {"error": {"message": reply.error_message, "type": "server_error"}},
                    )
                    return
                input_tokens = (
                    reply.input_tokens if reply.input_tokens is not None else len(raw) // 4
                )
                usage = {
                    "input_tokens": input_tokens,
                    "cached_tokens": reply.cached_tokens,
                    "cache_write_tokens": reply.cache_write_tokens,
                    "output_tokens": reply.output_tokens,
                    "reasoning_tokens": reply.reasoning_tokens,
                }
                record.usage = usage
                self._stream(reply, usage)

            def _send_json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply, usage: dict[str, int]) -> None:
                response_id = f"resp_{next(server._ids)}"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self._event("response.created", {"response": {"id": response_id}})
                for index, item in enumerate(reply.items):
                    item = {"id": f"item_{next(server._ids)}", **item}
                    self._event("response.output_item.done", {"output_index": index, "item": item})
                self._event(
                    "response.completed",
                    {
                        "response": {
                            "id": response_id,
                            "usage": {
                                "input_tokens": usage["input_tokens"],
                                "input_tokens_details": {
                                    "cached_tokens": usage["cached_tokens"],
                                    "cache_write_tokens": usage["cache_write_tokens"],
                                },
                                "output_tokens": usage["output_tokens"],
                                "output_tokens_details": {
                                    "reasoning_tokens": usage["reasoning_tokens"]
                                },
                                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
                            },
                        }
                    },
                )
                self.close_connection = True

            def _event(self, kind: str, payload: dict[str, Any]) -> None:
                data = json.dumps({"type": kind, **payload})
                self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
                self.wfile.flush()

        return Handler
