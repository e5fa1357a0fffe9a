"""The console as `make run` serves it: DEBUG off, gunicorn, static files by whitenoise after
collectstatic, and the demo user signing in with the password `run_main` printed."""

import re
import signal
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.controlplane.test_deploy import (
    BASE_DIR,
    get,
    manage,
    only_key_and_hosts,
    stop,
    wait_for_line,
)


@pytest.fixture(scope="module")
def run_main_server(tmp_path_factory):
    """`manage.py run_main` (no worker) with DEBUG off on a fresh database; yields what it
    printed: the console URL and the demo user's password."""
    tmp_path = tmp_path_factory.mktemp("console-run-main")
    env = only_key_and_hosts(tmp_path)
    migrated = manage(env, "migrate", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    out_path = tmp_path / "run_main.out"
    with out_path.open("wb") as out, (tmp_path / "run_main.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "run_main", "--addrport", "127.0.0.1:0", "--no-worker"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=err,
        )
    try:
        console = wait_for_line(out_path.read_text, r"Console: +(http://127\.0\.0\.1:\d+/console/)")
        password = wait_for_line(out_path.read_text, r"Demo user: +demo +password: (\S+)")
        yield {"console": console.group(1), "password": password.group(1)}
    finally:
        assert stop(process, signal.SIGINT) == 0, (tmp_path / "run_main.err").read_text()


def test_console_static_files_are_served_with_debug_off(run_main_server):
    base = run_main_server["console"].removesuffix("/console/")
    page = get(base, "/console/sign-in")
    assert page.status == 200
    html = page.body.decode()
    assert '<html lang="en">' in html
    for name, content_type in (("console.css", "text/css"), ("htmx.min.js", "javascript")):
        stem, _, suffix = name.rpartition(".")
        hashed = rf'"(/static/console/{re.escape(stem)}\.[0-9a-f]{{12}}\.{suffix})"'
        match = re.search(hashed, html)
        assert match, f"{name} not linked with a hashed name in:\n{html}"
        asset = get(base, match.group(1), **{"Accept-Encoding": "gzip"})
        assert asset.status == 200
        assert content_type in asset.getheader("Content-Type")
        assert asset.getheader("Content-Encoding") == "gzip"
        assert "max-age=315360000" in asset.getheader("Cache-Control")
    # The plain name is served too (whitenoise keeps the original beside the hashed copy).
    assert get(base, "/static/console/console.css").status == 200


def test_the_demo_user_signs_in_and_uses_the_console_with_debug_off(page, run_main_server):
    console = run_main_server["console"]
    page.goto(console)
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/$"))
    # The stylesheet applied: the header is the console's dark bar, not an unstyled page.
    header_colour = page.locator(".site-header").evaluate(
        "element => getComputedStyle(element).backgroundColor"
    )
    assert header_colour == "rgb(18, 38, 58)"
    page.get_by_label("User name").fill("demo")
    page.get_by_label("Password").fill(run_main_server["password"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Memory console")

    page.get_by_role("link", name="My settings").click()
    page.get_by_label("Use memories in my new tasks").check()
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_contain_text("use_memories")

    page.get_by_role("link", name="Extraction log").click()
    page.get_by_role("button", name="Run now", exact=True).click()
    expect(page.locator('#run-result [data-summary="scanned"]')).to_have_text("0")

    page.get_by_role("link", name="Projects").click()
    expect(page.get_by_role("link", name="demo").first).to_be_visible()
