"""A hijacked agent: tries everything a prompt-injected agent would, and prints what it got.

Run by the `command` executor (its prompt on stdin) or by the real codex CLI's shell tool (the
same JSON as its one argument): `{"paths": [...], "canary": "...", "approve_url": "..."}`.
It prints one JSON object: its environment's names, whether the canary value was found in
its environment or in any `/proc/*/environ`, which of `paths` it could read or list, whether
a database connection opened, what the memory tools answered, and what an approval with the
task key got. Standard library and the virtualenv's packages only.
"""

import contextlib
import glob
import json
import os
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


def postgres_connects() -> str:
    try:
        import psycopg
    except ImportError as exc:
        return f"no driver: {exc}"
    try:
        # The worker's URL, if the agent had it; else libpq's defaults (the local socket).
        with psycopg.connect(os.environ.get("DATABASE_URL", ""), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return "connected"
    except Exception as exc:
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
    report["postgres"] = postgres_connects()
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
