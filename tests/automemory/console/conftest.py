"""Console tests: a real Chromium (Playwright) against pytest-django's live server, plus data.

The browser is the OS's Chromium (`CONSOLE_BROWSER` overrides the path); Playwright's own
browser download is not used. Without a browser the browser tests skip with the reason, except
under CI (`CI` set), where they fail: CI must not silently skip them.
"""

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from automemory.models import AutoMemoryLog, Outcome, Reason

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_configure(config):
    # pytest-base-url (a pytest-playwright dependency) still declares a session fixture as a
    # method, which pytest deprecates; nothing here depends on it.
    config.addinivalue_line(
        "filterwarnings", "ignore:Session-scoped fixtures defined as instance methods"
    )


def console_browser_path() -> str | None:
    """The Chromium to drive: `CONSOLE_BROWSER`, else `chromium` on PATH, else the Debian path."""
    override = os.environ.get("CONSOLE_BROWSER")
    if override:
        return override if Path(override).is_file() else None
    for candidate in (shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate:
            return candidate
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


@pytest.fixture(scope="session")
def playwright(playwright):
    """pytest-playwright's Playwright, with Django's async safety check off while it runs.

    Playwright's sync API keeps an asyncio event loop running in the test's thread from its
    start to the session's end, and Django refuses ORM calls from a thread with a running loop.
    The tests' ORM calls (fixtures, assertions) are plain synchronous code, so the check does
    not apply to them. Set only once a browser test starts, and removed at the end.
    """
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield playwright
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's launch arguments, pointed at the OS's Chromium."""
    path = console_browser_path()
    if path is None:
        reason = (
            "no Chromium found (install it: apt-get install chromium, or set CONSOLE_BROWSER "
            "to its path)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {reason}", pytrace=False)
        pytest.skip(reason)
    return {
        **browser_type_launch_args,
        "executable_path": path,
        "args": CHROMIUM_ARGS,
        "headless": True,
    }


@pytest.fixture
def console_url(live_server, transactional_db):
    """A function giving the absolute URL of a console path on the live server."""

    def url(path: str = "/console/") -> str:
        return live_server.url + path

    return url


def is_csp_violation(text: str) -> bool:
    """Whether a browser console message reports a content security policy violation."""
    return "Content Security Policy" in text or "Content-Security-Policy" in text


@pytest.fixture
def csp_violations():
    """What the page's console reported as CSP violations (the `page` fixture fills it)."""
    return []


@pytest.fixture
def page(page, csp_violations, request):
    """pytest-playwright's page with short timeouts: a missing element fails in seconds.

    Any content security policy violation the browser reports in its console fails the test
    (at teardown), unless the test marks itself `expects_csp_violation`."""
    page.set_default_timeout(10_000)
    page.set_default_navigation_timeout(20_000)
    page.on(
        "console",
        lambda message: (
            csp_violations.append(message.text) if is_csp_violation(message.text) else None
        ),
    )
    yield page
    if request.node.get_closest_marker("expects_csp_violation") is None:
        assert not csp_violations, f"CSP violations reported: {csp_violations}"


@pytest.fixture
def signed_in_page(page, console_url, context):
    """`signed_in_page(user)`: the browser page with `user`'s session, at the console home.

    The session comes from Django's own login (the sign-in form itself is tested on its own),
    so each test starts signed in without typing a password.
    """

    def sign_in(user, path: str = "/console/"):
        client = Client()
        client.force_login(user)
        session_cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
        context.clear_cookies()
        context.add_cookies(
            [
                {
                    "name": django_settings.SESSION_COOKIE_NAME,
                    "value": session_cookie,
                    "url": console_url("/"),
                }
            ]
        )
        page.goto(console_url(path))
        return page

    return sign_in


@pytest.fixture
def signed_in_client():
    """`signed_in_client(user)`: a Django test client with `user`'s session (CSRF enforced)."""

    def make(user, *, enforce_csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=enforce_csrf)
        client.force_login(user)
        return client

    return make


@pytest.fixture
def log_row_factory(db):
    """Extraction log rows for a task (one per task), as the sweep writes them."""

    def make(
        task,
        *,
        outcome=Outcome.SKIPPED,
        reason=Reason.NOT_IDLE,
        memory=None,
        attempted_ago=timedelta(minutes=5),
        **fields,
    ) -> AutoMemoryLog:
        when = timezone.now() - attempted_ago
        return AutoMemoryLog.objects.create(
            task=task,
            user=task.user,
            outcome=outcome,
            reason=reason,
            memory=memory,
            first_attempt_at=fields.pop("first_attempt_at", when),
            last_attempt_at=when,
            **fields,
        )

    return make
