"""A sandboxed agent's network: its own loopback, the memory tools, the destinations
`WORKER_AGENT_EGRESS` allows through the worker's egress door (worker/egress.py), and nothing
else of the host or the world. Real bubblewrap, a real HTTP server of the host, a real
agent process; in CI bubblewrap must run (`.ci/run` installs it)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from prometheus_client import REGISTRY

from tests.worker.test_agent_isolation import bwrap_or_skip
from worker import egress, sandbox
from worker.egress import Destination, destination_parse, url_destination


class Greeter(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello {self.path} via {self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def host_server():
    """An HTTP server of the worker's host, on every interface."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Greeter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def agent(settings, tmp_path):
    """Run a Python snippet as a sandboxed agent; its printed JSON back."""
    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    settings.WORKER_SANDBOX_NETWORK = "isolated"
    settings.WORKER_TASK_ROOT = str(tmp_path / "tasks")
    settings.WORKER_MEMORY_TOOLS = False

    def run(code: str) -> dict:
        room = sandbox.task_room(task_id=7)
        args = sandbox.sandboxed([sys.executable, "-I", "-c", textwrap.dedent(code)], room=room)
        done = subprocess.run(
            args, capture_output=True, text=True, env=sandbox.agent_env(room=room), timeout=60
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return run


PROBES = """
import json, os, socket, urllib.request

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.read().decode()
    except Exception as exc:
        return f"error: {exc}"

def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "open"
    except OSError as exc:
        return f"refused: {exc}"

def connect_tunnel(host, port, path):
    proxy = os.environ["HTTPS_PROXY"].removeprefix("http://")
    proxy_host, proxy_port = proxy.rsplit(":", 1)
    with socket.create_connection((proxy_host, int(proxy_port)), timeout=5) as conn:
        ask = f"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n"
        conn.sendall(ask.encode())
        status = conn.recv(4096).decode().split("\\r\\n")[0]
        if " 200 " not in status:
            return status
        ask = f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n"
        conn.sendall(ask.encode())
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
        return data.decode().split("\\r\\n\\r\\n", 1)[1]
"""


def test_an_agent_reaches_an_allowed_destination_through_the_door(agent, settings, host_server):
    name, port = socket.gethostname(), host_server.server_address[1]
    settings.WORKER_AGENT_EGRESS = [f"{name}:{port}"]

    seen = agent(
        PROBES
        + f"""
print(json.dumps({{
    "plain": get("http://{name}:{port}/plain?x=1"),
    "tunnel": connect_tunnel("{name}", {port}, "/tunnel"),
}}))
"""
    )

    # Names are resolved outside: the agent has no DNS of its own.
    assert seen["plain"] == f"hello /plain?x=1 via {name}:{port}"
    assert seen["tunnel"] == f"hello /tunnel via {name}"


def test_an_agent_reaches_nothing_else(agent, settings, host_server):
    name, port = socket.gethostname(), host_server.server_address[1]
    settings.WORKER_AGENT_EGRESS = [f"{name}:{port + 1 if port < 65535 else port - 1}"]
    refused = REGISTRY.get_sample_value("worker_agent_egress_refused_total") or 0

    seen = agent(
        PROBES
        + f"""
print(json.dumps({{
    "plain": get("http://{name}:{port}/"),
    "tunnel": connect_tunnel("{name}", {port}, "/"),
    "loopback": tcp("127.0.0.1", {port}),
    "outside": tcp("192.0.2.1", 80),
    "name": tcp("{name}", {port}),
}}))
"""
    )

    assert seen["plain"] == "error: HTTP Error 403: Forbidden"
    assert seen["tunnel"] == "HTTP/1.1 403 Forbidden"
    # The host's loopback is not the sandbox's; there is no route out and no DNS.
    assert seen["loopback"].startswith("refused")
    assert seen["outside"].startswith("refused")
    assert seen["name"].startswith("refused")
    assert REGISTRY.get_sample_value("worker_agent_egress_refused_total") == refused + 2


def test_a_loopback_destination_is_the_host_s_own_port(agent, settings, host_server):
    port = host_server.server_address[1]
    settings.WORKER_AGENT_EGRESS = [f"127.0.0.1:{port}"]

    seen = agent(PROBES + f'print(json.dumps({{"local": get("http://127.0.0.1:{port}/x")}}))')

    assert seen["local"] == f"hello /x via 127.0.0.1:{port}"


@pytest.mark.parametrize(
    "head",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT nohost HTTP/1.1\r\n\r\n",
        b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
        b"GET ftp://host/ HTTP/1.1\r\n\r\n",
        b"GET http://host:x/ HTTP/1.1\r\n\r\n",
        b"GET http://host/ HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET http://host/ SPDY/3\r\n\r\n",
    ],
)
def test_the_proxy_answers_a_malformed_request_with_a_400(head):
    gateway = egress.EgressGateway([Destination("example.invalid", 443)])
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(str(gateway.folder / egress.PROXY_SOCKET))
            conn.sendall(head)
            assert conn.recv(100).startswith(b"HTTP/1.1 400 ")
    finally:
        gateway.close()
    assert not gateway.folder.exists()


def test_the_proxy_drops_a_head_that_never_ends():
    gateway = egress.EgressGateway([Destination("example.invalid", 443)])
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(str(gateway.folder / egress.PROXY_SOCKET))
            with pytest.raises(OSError):  # closed under the sender's feet
                for _ in range(200):
                    conn.sendall(b"X-Filler: " + b"a" * 4096 + b"\r\n")
    finally:
        gateway.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api.openai.com:443", Destination("api.openai.com", 443)),
        ("API.OpenAI.com.:443", Destination("api.openai.com", 443)),
        ("10.0.0.5:8080", Destination("10.0.0.5", 8080)),
        ("[::1]:8000", Destination("::1", 8000)),
    ],
)
def test_a_destination_is_host_and_port(text, expected):
    assert destination_parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "api.openai.com",
        "host:0",
        "host:65536",
        "host:http",
        "::1:80",
        "user@host:22",
        "http://host:80",
        "host :80",
        "[::1]x",
        ":443",
    ],
)
def test_anything_else_is_not_a_destination(text):
    with pytest.raises(ValueError):
        destination_parse(text)


def test_a_url_names_its_destination():
    assert url_destination("https://api.openai.com/v1") == Destination("api.openai.com", 443)
    assert url_destination("http://127.0.0.1:8000") == Destination("127.0.0.1", 8000)
    assert url_destination("ftp://host/") is None
    assert url_destination("http://host:bad/") is None
    assert Destination("127.0.0.1", 1).loopback and Destination("localhost", 1).loopback
    assert not Destination("vm", 1).loopback
