"""A small OpenAI-compatible server for tests: real HTTP on 127.0.0.1, scripted answers.

Use the `fake_openai` fixture (tests/automemory/conftest.py); it starts one server per test,
points `AUTOMEMORY_OPENAI_BASE_URL` at it and stops it afterwards.

    fake_openai.enqueue(answer({"worth_remembering": True, ...}), http_error(500))
    fake_openai.respond_with(answer({...}))   # for every request after the queue runs out
    fake_openai.requests                      # what was sent: RecordedRequest(path, headers, body)
    fake_openai.completion_requests           # those to /v1/chat/completions

Replies are built with `answer(obj)` (a completion whose message content is `obj` as JSON),
`raw_answer(text)` (any content, e.g. invalid JSON), `http_error(status)` and `hang(seconds)`
(answers after `seconds`, or when the server stops). A request with nothing scripted gets a
500 whose message says so.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETIONS_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted reply: an HTTP status and JSON body, sent after `delay` seconds."""

    status: int
    body: dict[str, Any]
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: its path, headers (names lower-cased) and parsed JSON body."""

    path: str
    headers: dict[str, str]
    body: Any

    @property
    def text(self) -> str:
        """Every message's content, joined: what the model was shown."""
        messages = self.body.get("messages", []) if isinstance(self.body, dict) else []
        return "\n".join(str(message.get("content", "")) for message in messages)


def raw_answer(
    content: str,
    *,
    prompt_tokens: int = 1000,
    completion_tokens: int = 100,
    cached_tokens: int = 0,
    model: str = "fake-model",
    usage: bool = True,
) -> Reply:
    """A 200 completion whose message content is `content` verbatim."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }
    return Reply(200, body)


def answer(obj: Any, **kwargs) -> Reply:
    """A 200 completion whose message content is `obj` serialised as JSON."""
    return raw_answer(json.dumps(obj), **kwargs)


def http_error(status: int, message: str = "scripted failure") -> Reply:
    """An OpenAI-style error body with `status`; asks the SDK to retry after 10 ms."""
    body = {"error": {"message": message, "type": "server_error", "code": None}}
    return Reply(status, body, headers={"retry-after-ms": "10"})


def hang(seconds: float, then: Reply | None = None) -> Reply:
    """Answer only after `seconds` (or when the server stops): for timeout tests."""
    then = then or http_error(500, "answered after hanging")
    return Reply(then.status, then.body, delay=seconds, headers=then.headers)


class FakeOpenAI:
    """The server: `start()`, `stop()`, `base_url`, `enqueue()`, `respond_with()`, `requests`."""

    def __init__(self):
        self._queue: deque[Reply] = deque()
        self._default: Reply | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def enqueue(self, *replies: Reply) -> None:
        """Answer the next requests with `replies`, in order."""
        with self._lock:
            self._queue.extend(replies)

    def respond_with(self, reply: Reply | Callable[[RecordedRequest], Reply]) -> None:
        """Answer every request with `reply` once the queue is empty; a callable is called with
        each request (in the server's thread) and answers with what it returns."""
        with self._lock:
            self._default = reply

    @property
    def completion_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == COMPLETIONS_PATH]

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if request.path != COMPLETIONS_PATH:
            return http_error(404, f"no route {request.path}")
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            default = self._default
        if callable(default):
            return default(request)
        if default is not None:
            return default
        return http_error(500, "no scripted response")

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                recorded = RecordedRequest(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with fake._lock:
                    fake.requests.append(recorded)
                reply = fake._next_reply(recorded)
                if reply.delay and fake._stopping.wait(reply.delay):
                    return
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format, *args):
                pass

        return Handler
