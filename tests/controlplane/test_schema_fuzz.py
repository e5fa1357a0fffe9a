"""The schema is the contract: schemathesis fuzzes every operation of `/api/schema` against a
live server (gunicorn, DEBUG off) and fails on any 5xx or any response the schema does not
describe (status code, content type, body).

The server runs on 127.0.0.1 and a free port, against a database of its own (a SQLite file,
or a throwaway PostgreSQL database next to the one DATABASE_URL names), prepared through the
public surface: `manage.py create_user` for the token, then the API for a project, a task,
a follow-up and memories. Throttling is off on that server (empty rates), so no 429 hides a
response. The memory tools (`/memory-tools/...`) take only a task key: they are fuzzed in a
run of their own with the key of a task the worker's claim set running. The run is bounded:
at most SCHEMA_FUZZ_EXAMPLES examples per operation (default 50) and SCHEMA_FUZZ_MAX_SECONDS
per schemathesis run. Token revocation is fuzzed in a run of its
own, last, since a fuzzed id may be the fuzzer's own token.
"""

import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "50"))
MAX_SECONDS = int(os.environ.get("SCHEMA_FUZZ_MAX_SECONDS", "600"))
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
]
THROTTLE_SCOPES = ["USER", "ANON", "FAILED_AUTH", "RUN", "RUN_FORCE", "MEMORY_TOOL"]
REVOKE = "users_me_tokens_revoke"
MEMORY_TOOLS = "^/memory-tools/"
# The worker's claim of the oldest queued task, in the server's database: its task key.
CLAIM = (
    "from worker.services import claim_key_store, task_claim_next; "
    "claim = task_claim_next(worker_id='schema-fuzz'); claim_key_store(claim); "
    "print(claim.memory_key)"
)


def _postgres_database(url: str):
    """A fresh PostgreSQL database beside the one `url` names; yields its URL, then drops it."""
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_schema_fuzz_{secrets.token_hex(4)}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def server_env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("schema_fuzz")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("API_THROTTLE_", "SECURE_", "DJANGO_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        DEBUG="False",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1",
        STATIC_ROOT=str(tmp_path / "static"),
        XDG_RUNTIME_DIR=str(tmp_path),
        LOG_LEVEL="ERROR",
        PYTHONUNBUFFERED="1",
        **{f"API_THROTTLE_{scope}": "" for scope in THROTTLE_SCOPES},
    )
    database_url = os.environ.get("DATABASE_URL", "")
    if database_url.startswith(("postgres://", "postgresql://")):
        databases = _postgres_database(database_url)
        env["DATABASE_URL"] = next(databases)
        yield tmp_path, env
        databases.close()
    else:
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'fuzz.sqlite3'}"
        yield tmp_path, env


def _manage(env, *args) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _api(
    url: str, token: str, method: str, path: str, body: dict | None = None, scheme: str = "Token"
) -> dict:
    request = urllib.request.Request(
        url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"{scheme} {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


@pytest.fixture(scope="module")
def fuzz_server(server_env):
    """(url, token, task key): a gunicorn server with a staff user owning a project (with a
    repository), a task on its default branch, a follow-up and memories (user- and
    project-level), and a running task's key."""
    tmp_path, env = server_env
    _manage(env, "migrate", "--noinput", "-v0")
    token = _manage(env, "create_user", "fuzzer", "--staff").strip().splitlines()[-1]
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "controlplane.wsgi"),
                *("--bind", "127.0.0.1:0", "--workers", "2", "--timeout", "60"),
                # No request-line limit: gunicorn's own 414 for very long query strings is
                # not the application's response, and no schema can document it.
                *("--limit-request-line", "0"),
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        url = match.group(1)
        project = _api(url, token, "POST", "/projects", {"name": "Fuzzed project"})
        _api(url, token, "POST", f"/projects/{project['id']}/tasks", {"prompt": "Run it."})
        task_key = _manage(env, "shell", "-c", CLAIM).strip().splitlines()[-1]
        repository = {"url": "https://git.example.com/app.git", "credential": "fuzz-token-1"}
        _api(url, token, "PUT", f"/projects/{project['id']}/repository", repository)
        task = _api(url, token, "POST", f"/projects/{project['id']}/tasks", {"prompt": "Fix it."})
        assert task["branch"] == "main"
        _api(url, token, "POST", f"/tasks/{task['id']}/followups", {"message": "And test it."})
        _api(url, token, "POST", "/users/me/memories", {"content": "Prefers small commits."})
        _api(url, token, "POST", f"/projects/{project['id']}/memories", {"content": "Uses ruff."})
        yield url, token, task_key
    finally:
        server.terminate()
        server.wait(timeout=30)


def _schemathesis(
    url: str, token: str, report: Path, *selection: str, scheme: str = "Token"
) -> str:
    """Run `st run` over the selected operations; its output (the assertion fails on any
    failure)."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "schemathesis.cli"),
            *("run", f"{url}/api/schema", "--url", url),
            *("--header", f"Authorization: {scheme} {token}"),
            *("--checks", ",".join(CHECKS)),
            *("--phases", "examples,coverage,fuzzing"),
            # No --max-time: schemathesis would keep fuzzing until it is spent.
            *("--max-examples", str(EXAMPLES)),
            "--generation-deterministic",
            *("--request-timeout", "30"),
            *("--report", "junit", "--report-junit-path", str(report)),
            "--no-color",
            *selection,
        ],
        cwd=report.parent,  # its cache (.schemathesis/) goes there, not into the checkout
        capture_output=True,
        text=True,
        timeout=MAX_SECONDS,
    )
    summary = done.stdout[done.stdout.rfind("SUMMARY") :]
    print(summary)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-4000:]
    assert "Failures:" not in summary, summary
    return done.stdout


def test_every_operation_conforms_to_the_schema_under_fuzzing(fuzz_server, tmp_path):
    url, token, task_key = fuzz_server
    started = time.monotonic()
    # Revoking tokens last: a fuzzed id may be the fuzzer's own token.
    _schemathesis(url, token, tmp_path / "all.xml", "--exclude-operation-id", REVOKE)
    # The key answers (the run is not all 401s), before and after its run.
    search = {"query": "ruff"}
    assert _api(url, task_key, "POST", "/memory-tools/memory_search", search, scheme="Bearer")
    tools = _schemathesis(
        url, task_key, tmp_path / "tools.xml", "--include-path-regex", MEMORY_TOOLS, scheme="Bearer"
    )
    assert "Selected: 4/" in tools, tools[-3000:]
    assert _api(url, task_key, "POST", "/memory-tools/memory_search", search, scheme="Bearer")
    _schemathesis(url, token, tmp_path / "revoke.xml", "--include-operation-id", REVOKE)
    print(f"schemathesis: {time.monotonic() - started:.1f} s")
