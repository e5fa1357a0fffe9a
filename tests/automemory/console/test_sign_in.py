"""Sign-in and sign-out: in the browser, and the access rules through the test client."""

import re

import pytest
from playwright.sync_api import expect

from automemory.models import Outcome

pytestmark = pytest.mark.django_db


def test_sign_in_with_password_then_sign_out(page, console_url, alice, project_factory):
    project_factory(alice, "Shop backend")
    page.goto(console_url("/console/settings"))
    # Not signed in: sent to the sign-in page, which comes back to the page asked for.
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/settings$"))
    expect(page.locator("html")).to_have_attribute("lang", "en")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("pw-alice")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(console_url("/console/settings"))
    expect(page.get_by_role("heading", level=1)).to_have_text("My auto memory settings")
    expect(page.get_by_text("Signed in as")).to_contain_text("alice")

    page.goto(console_url("/console/"))
    expect(page.get_by_role("link", name="Shop backend")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(console_url("/console/sign-in"))
    page.goto(console_url("/console/"))
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/$"))


def test_wrong_password_is_refused_with_a_message(page, console_url, alice):
    page.goto(console_url("/console/sign-in"))
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("not-her-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("correct username and password")
    expect(page).to_have_url(console_url("/console/sign-in"))
    page.goto(console_url("/console/"))
    expect(page).to_have_url(re.compile(r"/console/sign-in"))


def test_keyboard_only_sign_in_and_skip_link(page, console_url, alice):
    page.goto(console_url("/console/sign-in"))
    expect(page.get_by_label("User name")).to_be_focused()
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    page.keyboard.type("pw-alice")
    page.keyboard.press("Enter")
    expect(page).to_have_url(console_url("/console/"))

    page.reload()
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()


def test_pages_need_a_session(client, alice):
    for path in ("/console/", "/console/settings", "/console/log"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/console/sign-in?next=")
    response = client.post("/console/run", {"force": "0"})
    assert response.status_code == 302
    assert response["Location"].startswith("/console/sign-in")


def test_an_api_token_is_not_a_console_session(client, alice, api_client_for):
    api = api_client_for(alice)
    response = api.get("/console/")
    assert response.status_code == 302


def test_sign_in_form_needs_csrf(alice):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    response = client.post("/console/sign-in", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


def test_sign_out_is_post_only_and_needs_csrf(signed_in_client, alice):
    client = signed_in_client(alice, enforce_csrf=True)
    assert client.get("/console/sign-out").status_code == 405
    assert client.post("/console/sign-out").status_code == 403
    assert client.get("/console/").status_code == 200


def test_an_open_redirect_after_sign_in_is_refused(client, alice):
    response = client.post(
        "/console/sign-in?next=https://evil.example/",
        {"username": "alice", "password": "pw-alice", "next": "https://evil.example/"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/console/"


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"username": "alice"},
        {"username": "x" * 5000, "password": "y"},
        {"username": "alice\x00", "password": "pw-alice"},
    ],
)
def test_malformed_sign_in_is_a_form_error_not_a_500(client, alice, data):
    response = client.post("/console/sign-in", data)
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_console_errors_have_console_pages_and_others_stay_plain(signed_in_client, alice):
    client = signed_in_client(alice)
    missing = client.get("/console/no-such-page")
    assert missing.status_code == 404
    html = missing.content.decode()
    assert "Skip to content" in html and "Not found" in html
    elsewhere = client.get("/no-such-page")
    assert elsewhere.status_code == 404
    assert "Skip to content" not in elsewhere.content.decode()


def test_a_strangers_404_is_the_console_page(page, signed_in_page, charlie, project):
    signed_in_page(charlie, f"/console/projects/{project.pk}/memories")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Not found")
    expect(page.get_by_text("Signed in as")).to_contain_text("charlie")
    expect(page.get_by_text(project.name)).to_have_count(0)


def test_a_viewers_forbidden_action_gets_the_console_403(
    signed_in_client, vera, project, task_factory
):
    task = task_factory(project, completed=True)
    response = signed_in_client(vera).post(
        f"/console/tasks/{task.pk}/flags", {"use_memories": "false"}
    )
    assert response.status_code == 403
    html = response.content.decode()
    assert "Not allowed" in html and "viewer" in html


def test_failed_sign_ins_are_limited_per_address(client, alice, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "failed_auth": "3/min",
        },
    }
    for _ in range(3):
        response = client.post("/console/sign-in", {"username": "alice", "password": "guess"})
        assert response.status_code == 200
    # Over the rate even the right password is refused, so guessing learns nothing.
    refused = client.post("/console/sign-in", {"username": "alice", "password": "pw-alice"})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # Another address is not affected.
    other = client.post(
        "/console/sign-in",
        {"username": "alice", "password": "pw-alice"},
        REMOTE_ADDR="192.0.2.7",
    )
    assert other.status_code == 302


def test_home_counts_the_users_log_by_outcome(
    signed_in_client, alice, bob, project, task_factory, log_row_factory
):
    for _ in range(2):
        log_row_factory(task_factory(project, alice, completed=True))
    log_row_factory(task_factory(project, alice, completed=True), outcome=Outcome.ERROR)
    log_row_factory(task_factory(project, bob, completed=True))  # not alice's
    html = signed_in_client(alice).get("/console/").content.decode()
    assert 'Skipped: <a href="/console/log?outcome=skipped">2</a>' in html
    assert 'Error: <a href="/console/log?outcome=error">1</a>' in html
    assert 'Extracted: <a href="/console/log?outcome=extracted">0</a>' in html
