"""The production path: settings under the environment docs/deploy.md documents, a real
gunicorn serving the app and its static files with DEBUG off, and `manage.py run_main`.

Each test starts processes with the production settings (`controlplane.settings`) and an
environment built here from scratch, not the test settings.
"""

import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import CommandError, call_command
from prometheus_client.parser import text_string_to_metric_families

BASE_DIR = Path(__file__).resolve().parents[2]
DEPLOY_DOC = BASE_DIR / "docs" / "deploy.md"

# Every variable that changes what these tests check; the tests set the ones they need.
SETTINGS_VARIABLES = {
    "DJANGO_SETTINGS_MODULE",
    "DEBUG",
    "SECRET_KEY",
    "DATABASE_URL",
    "ALLOWED_HOSTS",
    "STATIC_ROOT",
    "CSRF_TRUSTED_ORIGINS",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SECURE_REDIRECT_EXEMPT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    # Set by the console's browser tests while their browser runs
    # (tests/automemory/console/conftest.py).
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    # Metrics: run_main sets up the multiprocess directory unless one is given.
    "METRICS_ENABLED",
    "PROMETHEUS_MULTIPROC_DIR",
}


def documented_environment() -> dict[str, str]:
    """The `NAME=value` lines of the ```env block in docs/deploy.md."""
    match = re.search(r"^```env\n(.*?)^```", DEPLOY_DOC.read_text(), re.S | re.M)
    assert match, "docs/deploy.md has no ```env block"
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    assert all(re.fullmatch(r"[A-Z_]+=\S.*", line) for line in lines), lines
    return dict(line.split("=", 1) for line in lines)


def new_secret_key() -> str:
    return secrets.token_urlsafe(50)


def process_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """The inherited environment without any setting, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        STATIC_ROOT=str(tmp_path / "static"),
        XDG_RUNTIME_DIR=str(tmp_path),  # gunicorn's control socket goes there
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env.update(variables)
    return env


def only_key_and_hosts(tmp_path: Path) -> dict[str, str]:
    return process_env(tmp_path, SECRET_KEY=new_secret_key(), ALLOWED_HOSTS="127.0.0.1")


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def get(url: str, path: str, **headers: str) -> http.client.HTTPResponse:
    """One plain HTTP GET that does not follow redirects; the body is read."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


def post(url: str, path: str, body: dict, **headers: str) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("POST", path, body=json.dumps(body), headers=headers)
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


def wait_for_line(read, pattern: str, *, timeout: float = 60.0) -> re.Match:
    """Call `read()` (returns text so far) until `pattern` matches it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, read())
        if match:
            return match
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} within {timeout:g}s in:\n{read()}")


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


# --- check --deploy -------------------------------------------------------------------------


def test_check_deploy_reports_nothing_under_the_documented_environment(tmp_path):
    documented = documented_environment()
    placeholders = {name for name, value in documented.items() if value.startswith("<")}
    assert placeholders == {"SECRET_KEY", "DATABASE_URL"}
    assert documented["DEBUG"] == "False"
    variables = {
        **documented,
        "SECRET_KEY": new_secret_key(),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
    }

    result = manage(process_env(tmp_path, **variables), "check", "--deploy", "--fail-level", "INFO")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_about_https_with_only_a_key_and_hosts(tmp_path):
    result = manage(only_key_and_hosts(tmp_path), "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in result.stderr
    assert "security.W018" not in result.stderr  # DEBUG is off without being set


def test_debug_off_without_a_secret_key_refuses_to_start(tmp_path):
    result = manage(process_env(tmp_path), "check")

    assert result.returncode != 0
    assert "Set SECRET_KEY" in result.stderr


HTTPS_PROBE = """
import django
django.setup()
from django.test import Client
client = Client(SERVER_NAME="api.example.com")
plain = client.get("/api/schema")
proxied = client.get("/api/schema", HTTP_X_FORWARDED_PROTO="https")
health = client.get("/healthz")
print(plain.status_code, plain.headers.get("Location"))
print(proxied.status_code, proxied.headers.get("Strict-Transport-Security"))
print(health.status_code)
"""


def test_the_documented_environment_redirects_plain_http_and_trusts_the_proxy(tmp_path):
    variables = {**documented_environment(), "SECRET_KEY": new_secret_key()}
    del variables["DATABASE_URL"]
    env = process_env(tmp_path, **variables)

    result = subprocess.run(
        [sys.executable, "-c", HTTPS_PROBE],
        cwd=BASE_DIR,
        env={**env, "DJANGO_SETTINGS_MODULE": "controlplane.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    plain, proxied, health = result.stdout.splitlines()
    assert plain == "301 https://api.example.com/api/schema"
    assert proxied == "200 max-age=31536000; includeSubDomains; preload"
    assert health == "200"  # health checks stay reachable over plain HTTP


# --- gunicorn -------------------------------------------------------------------------------


def procfile() -> dict[str, str]:
    lines = (BASE_DIR / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def test_the_procfile_runs_the_server_the_workers_and_the_migrations():
    processes = procfile()

    assert set(processes) == {"web", "worker", "release"}
    assert processes["web"].startswith("gunicorn controlplane.wsgi ")
    assert processes["worker"] == "python manage.py run_worker"
    assert processes["release"] == "python manage.py migrate --noinput"


@pytest.fixture(scope="module")
def gunicorn_server(tmp_path_factory):
    """The Procfile's web command (this Python's gunicorn, on 127.0.0.1 and a free port),
    DEBUG off, with only SECRET_KEY and ALLOWED_HOSTS set (and a database and STATIC_ROOT of
    its own)."""
    tmp_path = tmp_path_factory.mktemp("gunicorn")
    env = only_key_and_hosts(tmp_path)
    collected = manage(env, "collectstatic", "--noinput", "-v0")
    assert collected.returncode == 0, collected.stderr
    web = procfile()["web"].replace("gunicorn ", f"{sys.executable} -m gunicorn ", 1)
    web = web.replace("0.0.0.0:", "127.0.0.1:")
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["sh", "-c", f"exec {web}"],
            cwd=BASE_DIR,
            env={**env, "PORT": "0"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = wait_for_line(log.read_text, r"Listening at: (http://127\.0\.0\.1:\d+)").group(1)
        yield url
    finally:
        stop(process)


def static_paths(html: str, suffix: str) -> list[str]:
    return re.findall(rf'["\'](/static/[^"\']+\.{suffix})["\']', html)


def test_gunicorn_serves_the_api_page_and_its_static_files(gunicorn_server):
    page = get(gunicorn_server, "/api/docs")

    assert page.status == 200
    scripts = static_paths(page.body.decode(), "js")
    assert any("swagger-ui-bundle" in path for path in scripts), scripts
    for path in scripts:
        # hashed names from the manifest collectstatic wrote
        assert re.search(r"\.[0-9a-f]{12}\.js$", path), path
        asset = get(gunicorn_server, path, **{"Accept-Encoding": "gzip"})
        assert asset.status == 200, path
        assert "javascript" in asset.getheader("Content-Type")
        assert asset.getheader("Content-Encoding") == "gzip"
        assert "max-age=315360000" in asset.getheader("Cache-Control")
    assert get(gunicorn_server, "/static/missing.js").status == 404


def test_gunicorn_serves_the_admin_login_page_and_its_css(gunicorn_server):
    page = get(gunicorn_server, "/admin/login/")

    assert page.status == 200
    stylesheets = static_paths(page.body.decode(), "css")
    assert any(re.search(r"/static/admin/css/base\.[0-9a-f]{12}\.css$", p) for p in stylesheets)
    for path in stylesheets:
        css = get(gunicorn_server, path)
        assert css.status == 200, path
        assert css.getheader("Content-Type").startswith("text/css")


def test_plain_http_is_served_with_only_a_key_and_hosts(gunicorn_server):
    page = get(gunicorn_server, "/admin/login/")

    assert page.status == 200  # no redirect to HTTPS
    assert page.getheader("Strict-Transport-Security") is None
    cookie = page.getheader("Set-Cookie")
    assert cookie.startswith("csrftoken=")
    assert "secure" not in cookie.lower()  # a browser keeps it over plain HTTP
    assert get(gunicorn_server, "/api/docs", Host="evil.example.com").status == 400


# --- run_main -------------------------------------------------------------------------------


def test_run_main_prints_the_address_it_serves_and_stops_on_ctrl_c(tmp_path):
    env = only_key_and_hosts(tmp_path)
    migrated = manage(env, "migrate", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    out_path = tmp_path / "run_main.out"
    with out_path.open("wb") as out, (tmp_path / "run_main.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_main", "--addrport", "127.0.0.1:0"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=err,
        )
    try:
        url = wait_for_line(out_path.read_text, r"API: +(http://127\.0\.0\.1:(\d+))/").group(1)
        assert not url.endswith(":0")
        assert f"Admin:      {url}/admin/" in out_path.read_text()

        assert get(url, "/api/docs").status == 200
        token = re.search(r"Demo token: (\S+)", out_path.read_text()).group(1)
        response = get(url, "/users/me/quota", Authorization=f"Token {token}")
        assert response.status == 200, response.body
    finally:
        code = stop(process, signal.SIGINT)

    assert code == 0, (tmp_path / "run_main.err").read_text()


def test_run_main_s_metrics_add_up_both_api_processes_and_the_worker(tmp_path):
    """`make run`'s /metrics: gunicorn's two processes and the worker share one directory."""
    env = {**only_key_and_hosts(tmp_path), "METRICS_ENABLED": "1"}
    assert manage(env, "migrate", "-v0").returncode == 0
    out_path = tmp_path / "run_main.out"
    with out_path.open("wb") as out, (tmp_path / "run_main.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_main", "--addrport", "127.0.0.1:0"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=err,
        )
    try:
        url = wait_for_line(out_path.read_text, r"API: +(http://127\.0\.0\.1:(\d+))/").group(1)
        token = re.search(r"Demo token: (\S+)", out_path.read_text()).group(1)
        auth = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        project = json.loads(get(url, "/projects", **auth).body)["results"][0]["id"]
        task = post(url, f"/projects/{project}/tasks", {"prompt": "count me"}, **auth)
        assert task.status == 201, task.body
        task_id = json.loads(task.body)["id"]
        deadline = time.monotonic() + 60
        while json.loads(get(url, f"/tasks/{task_id}", **auth).body)["status"] != "completed":
            assert time.monotonic() < deadline, (tmp_path / "run_main.err").read_text()
            time.sleep(0.2)
        for _ in range(30):  # spread over both gunicorn processes
            assert get(url, "/healthz").status == 200

        scraped = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(get(url, "/metrics").body.decode())
            for sample in family.samples
        }
    finally:
        code = stop(process, signal.SIGINT)
    assert code == 0, (tmp_path / "run_main.err").read_text()

    # the worker counted the claim; only the shared directory brings it to gunicorn's scrape
    assert scraped[("worker_task_claims_total", (("executor", "echo"),))] >= 1
    healthz = (("method", "GET"), ("route", "healthz"), ("status", "200"))
    assert scraped[("controlplane_http_requests_total", healthz)] == 30  # both processes' sum


def test_run_main_refuses_an_address_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(CommandError, match=r"cannot listen on 127\.0\.0\.1"):
            call_command("run_main", addrport=f"127.0.0.1:{port}")


@pytest.mark.parametrize("addrport", ["", "localhost:", "host:port", "127.0.0.1:70000", "a:b:c"])
def test_run_main_refuses_a_bad_address(addrport):
    with pytest.raises(CommandError, match="--addrport"):
        call_command("run_main", addrport=addrport)


@pytest.mark.django_db
def test_the_admin_index_says_worker_processes(admin_client):
    response = admin_client.get("/admin/")

    assert response.status_code == 200
    assert "Worker processes" in response.content.decode()
    assert "processs" not in response.content.decode()
