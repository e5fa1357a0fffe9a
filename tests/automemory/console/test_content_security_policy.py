"""A content security policy without inline script, and a Permissions-Policy, on the console,
the admin and the API docs; Chromium runs each page and reports no violation (the `page`
fixture fails any test whose browser console reports one)."""

import pytest
from django.test import Client
from django.urls import reverse
from playwright.sync_api import expect

from controlplane.models import IdentityMemory

PAGES = ["/console/sign-in", "/admin/login/", "/api/docs", "/api/docs?script"]


@pytest.mark.parametrize("path", PAGES)
def test_the_pages_send_a_csp_without_inline_script_and_a_permissions_policy(db, path):
    response = Client().get(path)
    assert response.status_code == 200
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in response["Content-Security-Policy"].split(";")
    )
    assert policy["script-src"] == "'self'"
    assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy["script-src"] + policy["default-src"]
    if not path.startswith("/api/docs"):  # Swagger UI sets inline styles as it renders
        assert "unsafe-inline" not in response["Content-Security-Policy"]
    assert "unsafe-eval" not in response["Content-Security-Policy"]
    permissions = response["Permissions-Policy"]
    for feature in ("camera=()", "microphone=()", "geolocation=()", "payment=()", "usb=()"):
        assert feature in permissions


def test_the_api_docs_start_from_a_script_file(db):
    html = Client().get("/api/docs").content.decode()
    assert "<script>" not in html
    assert '<script src="/api/docs?script=' in html or "/api/docs?script" in html


def test_the_admin_runs_without_a_violation(page, console_url, root, alice, project):
    memory = IdentityMemory.objects.create(
        scope="project", project=project, content="Deploy on Mondays.", created_by=alice
    )
    page.goto(console_url("/admin/login/?next=/admin/"))
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("pw-root")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
    for path in (
        "/admin/controlplane/identitymemory/",
        f"/admin/controlplane/identitymemory/{memory.pk}/change/",
        f"/admin/auth/user/{alice.pk}/change/",
        "/admin/controlplane/task/add/",
    ):
        response = page.goto(console_url(path))
        assert response.status == 200, path
        expect(page.locator("#content")).to_be_visible()
    # The changelist's select-all box is admin JavaScript: it ran.
    page.goto(console_url("/admin/controlplane/identitymemory/"))
    page.locator("#action-toggle").check()
    expect(page.locator(".action-counter")).to_contain_text("1 of 1 selected")


def test_the_api_docs_render_without_a_violation(page, console_url, db):
    page.goto(console_url("/api/docs"))
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("Control plane API")
    expect(page.locator(".opblock").first).to_be_visible()


def test_the_console_runs_htmx_without_a_violation(page, console_url, signed_in_page, alice):
    signed_in_page(alice, reverse("console:log"))
    page.get_by_role("button", name="Run now, skip the waiting gates").click()
    expect(page.locator("#run-result")).to_contain_text("Sweep summary")


@pytest.mark.expects_csp_violation
def test_an_inline_script_is_refused_and_reported(page, console_url, csp_violations, db):
    """The check itself: a script injected into a page does not run, and the browser says so
    in its console (which fails every other browser test)."""
    page.goto(console_url("/console/sign-in"))
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.injected = 1'; document.head.appendChild(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.injected") is None
    assert any("inline script" in text for text in csp_violations), csp_violations
