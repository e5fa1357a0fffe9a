"""My settings: every setting on one form, the API's validation messages, the API's save path."""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from automemory.console.settings_fields import error_messages, settings_fields
from automemory.models import AutoMemoryLog, AutoMemorySettings, Outcome, Reason
from automemory.models.settings import (
    MAX_IDLE_SECONDS,
    MAX_INJECTION_MAX_CHARS,
    MAX_UNUSED_DAYS,
    MIN_INJECTION_MAX_CHARS,
)
from automemory.services.preferences import SETTINGS_FIELDS

pytestmark = pytest.mark.django_db


def _api_message(api_client_for, user, body: dict, field: str) -> str:
    response = api_client_for(user).patch("/users/me/auto-memory-settings", body, format="json")
    assert response.status_code == 400, response.content
    return response.json()[field][0]


def test_change_settings_in_the_browser(
    signed_in_page, alice, project, task_factory, log_row_factory
):
    skipped = log_row_factory(
        task_factory(project, completed=True),
        outcome=Outcome.SKIPPED,
        reason=Reason.DURATION_TOO_SHORT,
    )
    page = signed_in_page(alice, "/console/settings")
    expect(page.get_by_role("heading", level=1)).to_have_text("My auto memory settings")

    page.get_by_label("Generate memories from my completed tasks").check()
    page.get_by_label("Idle time before extraction (seconds)").fill("60")
    page.get_by_label("Internal MCP servers (one per line)").fill("docs\nissue-tracker\n")
    page.get_by_label("Monthly memory budget (USD)").fill("2.50")
    page.get_by_label("Which memories a new task gets").select_option("relevant")
    page.get_by_role("button", name="Save settings").click()

    expect(page.get_by_role("status")).to_contain_text("Saved:")
    expect(page.get_by_label("Idle time before extraction (seconds)")).to_have_value("60")
    expect(page.get_by_label("Generate memories from my completed tasks")).to_be_checked()
    saved = AutoMemorySettings.objects.get(user=alice)
    assert saved.generate_memories is True
    assert saved.idle_seconds == 60
    assert saved.internal_mcp_servers == ["docs", "issue-tracker"]
    assert saved.monthly_memory_budget_usd == Decimal("2.50")
    assert saved.injection_ranking == "relevant"
    assert saved.use_memories is False  # untouched box stays off
    # As through the API: a stable skip is looked at again after a settings change.
    skipped.refresh_from_db()
    assert skipped.recheck is True

    # Unticking a box turns the setting off.
    page.get_by_label("Generate memories from my completed tasks").uncheck()
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_contain_text("generate_memories")
    saved.refresh_from_db()
    assert saved.generate_memories is False


def test_a_bad_value_shows_the_apis_message_and_saves_nothing(
    signed_in_page, alice, api_client_for
):
    expected = _api_message(
        api_client_for,
        alice,
        {"min_rate_limit_remaining_percent": 101},
        "min_rate_limit_remaining_percent",
    )
    page = signed_in_page(alice, "/console/settings")
    page.get_by_label("Idle time before extraction (seconds)").fill("120")
    quota = page.get_by_label("Minimum quota left (percent)")
    quota.fill("101")
    page.get_by_role("button", name="Save settings").click()

    expect(page.get_by_role("alert")).to_contain_text("Nothing was saved")
    expect(quota).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_min_rate_limit_remaining_percent_error")).to_have_text(expected)
    # The other values typed are kept for the next try.
    expect(page.get_by_label("Idle time before extraction (seconds)")).to_have_value("120")
    assert not AutoMemorySettings.objects.filter(user=alice).exists()


def test_the_form_has_each_setting_once():
    names = [spec.name for spec in settings_fields()]
    assert sorted(names) == sorted(SETTINGS_FIELDS)


def test_every_setting_has_a_labelled_input_and_help(signed_in_client, alice):
    html = signed_in_client(alice).get("/console/settings").content.decode()
    for name in SETTINGS_FIELDS:
        assert f'for="id_{name}"' in html, name
        assert f'id="id_{name}"' in html, name
        assert f'id="id_{name}_help"' in html, name


def test_each_number_input_takes_the_bounds_the_api_holds_it_to(signed_in_client, alice):
    html = signed_in_client(alice).get("/console/settings").content.decode()
    for name, low, high in [
        ("min_rate_limit_remaining_percent", 0, 100),
        ("idle_seconds", 0, MAX_IDLE_SECONDS),
        ("injection_max_chars", MIN_INJECTION_MAX_CHARS, MAX_INJECTION_MAX_CHARS),
        ("max_unused_days", 0, MAX_UNUSED_DAYS),
    ]:
        assert f'name="{name}" value="' in html, name
        tag = html.split(f'name="{name}"', 1)[1].split(">", 1)[0]
        assert f'min="{low}" max="{high}"' in tag, name


@pytest.mark.parametrize(
    ("field", "typed", "api_value"),
    [
        ("idle_seconds", "-1", -1),
        ("idle_seconds", "99999999999", 99999999999),
        ("idle_seconds", "abc", "abc"),
        ("idle_seconds", "1.5", 1.5),
        ("injection_max_chars", "1", 1),
        ("monthly_memory_budget_usd", "lots", "lots"),
        ("monthly_memory_budget_usd", "1.234", "1.234"),
        ("injection_ranking", "random", "random"),
        ("extract_model", "gpt\x00", "gpt\x00"),
        ("internal_mcp_servers", "a\na", ["a", "a"]),
    ],
)
def test_bad_values_get_the_apis_message(
    signed_in_client, api_client_for, alice, field, typed, api_value
):
    response = signed_in_client(alice).post("/console/settings", {field: typed})
    assert response.status_code == 400
    errors = response.context["errors"]
    api = api_client_for(alice).patch(
        "/users/me/auto-memory-settings", {field: api_value}, format="json"
    )
    assert api.status_code == 400
    # The same messages, in the same order, as the API gives for the same value.
    assert errors[field] == error_messages(api.json()[field])
    assert errors[field]
    assert not AutoMemorySettings.objects.filter(user=alice).exists()


def test_a_partial_post_changes_only_what_it_sends(signed_in_client, alice):
    client = signed_in_client(alice)
    assert client.post("/console/settings", {"use_memories": ["0", "1"]}).status_code == 302
    assert client.post("/console/settings", {"min_result_chars": "10"}).status_code == 302
    saved = AutoMemorySettings.objects.get(user=alice)
    assert saved.use_memories is True
    assert saved.min_result_chars == 10
    assert saved.generate_memories is False


def test_saving_nothing_new_still_rechecks_stable_skips(
    signed_in_client, alice, project, task_factory, log_row_factory
):
    row = log_row_factory(task_factory(project, completed=True), reason=Reason.EXTERNAL_CONTEXT)
    response = signed_in_client(alice).post("/console/settings", {"idle_seconds": "900"})
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.recheck is True


def test_settings_form_needs_csrf(signed_in_client, alice):
    client = signed_in_client(alice, enforce_csrf=True)
    response = client.post("/console/settings", {"idle_seconds": "5"})
    assert response.status_code == 403
    assert not AutoMemorySettings.objects.filter(user=alice).exists()


def test_unknown_fields_and_methods(signed_in_client, alice):
    client = signed_in_client(alice)
    response = client.post("/console/settings", {"user": "1", "updated_at": "x", "bogus": "1"})
    assert response.status_code == 302  # unknown form fields are not settings: ignored
    assert client.put("/console/settings").status_code == 405
    assert AutoMemoryLog.objects.count() == 0
