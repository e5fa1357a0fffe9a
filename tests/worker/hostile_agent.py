"""A hijacked agent: tries everything a prompt-injected agent would, and prints what it got.

Run by the `command` executor (its prompt on stdin) or by the real codex CLI's shell tool (the
same JSON as its one argument): `{"paths": [...], "canary": "...", "approve_url": "...",
"database_url": "...", "services": [[host, port], ...]}`.
It prints one JSON object: its environment's names, whether the canary value was found in
its environment or in any `/proc/*/environ`, which of `paths` it could read or list, whether
a database connection opened (with the worker's own URL, as an attacker who knows it would),
which `services` a TCP connection reached directly and through its proxy, what the memory
tools answered, and what an approval with the task key got. Standard library and the
virtualenv's packages only.
"""

import contextlib
import glob
import json
import os
import socket
import sqlite3
import sys
import urllib.error
import urllib.request


def readable(path: str) -> bool:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(16)
        return True
    except OSError:
        return False


def sqlite_opens(path: str) -> bool:
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        connection.close()
        return True
    except sqlite3.Error:
        return False


def postgres_connects(url: str) -> str:
    try:
        import psycopg
    except ImportError as exc:
        return f"no driver: {exc}"
    try:
        # The worker's URL as an attacker who knows it would give it (over TCP, as a server
        # trusting the worker host would let in without a password); else the agent's own
        # environment's, else libpq's defaults (the local socket).
        with psycopg.connect(url or os.environ.get("DATABASE_URL", ""), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return "connected"
    except Exception as exc:
        return f"refused: {type(exc).__name__}"


def tcp_opens(host: str, port: int) -> str:
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "open"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def through_proxy(host: str, port: int) -> str:
    """A CONNECT through whatever proxy the agent's environment names."""
    proxy = os.environ.get("HTTPS_PROXY", "")
    if not proxy:
        return "no proxy"
    proxy_host, _, proxy_port = proxy.removeprefix("http://").rstrip("/").rpartition(":")
    try:
        with socket.create_connection((proxy_host, int(proxy_port)), timeout=3) as conn:
            conn.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            return conn.recv(200).decode("latin-1").split("\r\n")[0]
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def post(url: str, body: dict, key: str) -> tuple[int, object]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None
    except (urllib.error.URLError, OSError) as error:
        return 0, str(error)


def main() -> None:
    raw = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    orders = json.loads(raw[raw.index("{") : raw.rindex("}") + 1])
    canary = orders["canary"]
    report: dict[str, object] = {"env_names": sorted(os.environ)}
    report["canary_in_env"] = any(canary in value for value in os.environ.values())
    hits = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if canary.encode() in open(path, "rb").read():  # noqa: SIM115
                hits.append(path)
    report["proc_environ_hits"] = hits
    report["pids_seen"] = len(glob.glob("/proc/[0-9]*"))
    report["readable"] = {path: readable(path) for path in orders["paths"]}
    report["sqlite_opened"] = [path for path in orders["paths"] if sqlite_opens(path)]
    report["postgres"] = postgres_connects(orders.get("database_url", ""))
    report["services"] = {
        f"{host}:{port}": tcp_opens(host, port) for host, port in orders.get("services", [])
    }
    report["proxied"] = {
        f"{host}:{port}": through_proxy(host, port) for host, port in orders.get("services", [])
    }
    key = os.environ.get("CONTROLPLANE_MEMORY_TOKEN", "")
    base = os.environ.get("CONTROLPLANE_MEMORY_URL", "")
    if key and base:
        status, body = post(f"{base}/memory-tools/memory_search", {"query": "deploy"}, key)
        report["memory_search"] = {"status": status, "body": body}
        status, _ = post(orders["approve_url"], {}, key)
        report["approve_status"] = status
    print(json.dumps(report))


if __name__ == "__main__":
    main()
