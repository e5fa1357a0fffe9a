"""The extraction log page: filters, explanations, links, pagination, Run now and its summary."""

import re

import pytest
from playwright.sync_api import expect

from automemory.console.explanations import REASON_EXPLANATIONS
from automemory.console.views import LOG_PAGE_SIZE
from automemory.models import AutoMemoryLog, Outcome, Reason
from controlplane.models import IdentityMemory, MemorySource

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_rows(alice, project, task_factory, log_row_factory, memory_factory):
    extracted_task = task_factory(project, prompt="Add the export button", completed=True)
    memory = memory_factory(project=project, source=MemorySource.AUTO, source_task=extracted_task)
    return {
        "extracted": log_row_factory(
            extracted_task, outcome=Outcome.EXTRACTED, reason=Reason.NEW, memory=memory
        ),
        "not_idle": log_row_factory(
            task_factory(project, prompt="Rename the settings module", completed=True),
            reason=Reason.NOT_IDLE,
        ),
        "external": log_row_factory(
            task_factory(project, prompt="Summarise the web page", completed=True),
            reason=Reason.EXTERNAL_CONTEXT,
            detail="mcp server browser",
        ),
    }


def test_filter_the_log_by_outcome_and_reason(signed_in_page, alice, three_rows):
    page = signed_in_page(alice, "/console/log")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(page.get_by_text(REASON_EXPLANATIONS[Reason.EXTERNAL_CONTEXT])).to_be_visible()

    page.get_by_label("Outcome").select_option("skipped")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"outcome=skipped"))
    expect(rows).to_have_count(2)
    expect(page.get_by_text("Add the export button")).to_have_count(0)

    page.get_by_label("Reason").select_option("external_context")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row).to_contain_text("Saw external context")
    expect(row).to_contain_text("Summarise the web page")
    expect(page.get_by_label("Outcome")).to_have_value("skipped")

    # A filter nothing matches says so and offers the way back.
    page.get_by_label("Outcome").select_option("error")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(0)
    expect(page.get_by_text("No task matches these filters")).to_be_visible()
    page.get_by_role("link", name="Clear the filters").click()
    expect(rows).to_have_count(3)


def test_log_rows_link_to_the_task_and_the_memory(signed_in_client, alice, three_rows):
    html = signed_in_client(alice).get("/console/log").content.decode()
    extracted = three_rows["extracted"]
    assert f'href="/console/tasks/{extracted.task_id}"' in html
    assert f'href="/console/memories/{extracted.memory_id}"' in html


def test_run_now_and_run_now_forced_show_the_summary(
    signed_in_page, alice, project, task_factory, auto_memory_on
):
    auto_memory_on(alice)
    task = task_factory(project, alice, completed=True, result_text="tiny")
    page = signed_in_page(alice, "/console/log")
    expect(page.get_by_text("Your log is empty")).to_be_visible()
    assert page.evaluate("typeof htmx") == "object"  # the vendored htmx loaded

    page.get_by_role("button", name="Run now", exact=True).click()
    summary = page.locator("#run-result")
    expect(summary.get_by_role("heading")).to_have_text("Sweep summary")
    expect(summary.locator('[data-summary="scanned"]')).to_have_text("1")
    expect(summary.locator('[data-summary="extracted"]')).to_have_text("0")
    expect(summary.locator('[data-summary="skipped"]')).to_contain_text("Result too short: 1")
    assert AutoMemoryLog.objects.get(task=task).reason == Reason.RESULT_TOO_SHORT

    page.get_by_role("button", name="Run now, skip the waiting gates").click()
    expect(summary.get_by_role("heading")).to_have_text("Sweep summary (waiting gates skipped)")
    expect(summary.locator('[data-summary="extracted"]')).to_have_text("1")
    assert IdentityMemory.objects.filter(source_task=task).count() == 1

    # The log under the summary already shows the new state.
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody tr").first).to_contain_text("Extracted")
    expect(page.locator("tbody tr").first).to_contain_text("(forced)")
    # The summary is shown once: reloading does not sweep again or repeat it.
    page.reload()
    expect(page.locator("#run-result")).to_have_count(0)
    expect(page.locator("tbody tr").first).to_contain_text("Extracted")


def test_run_now_without_javascript_redirects_to_the_log_with_the_summary(
    signed_in_client, alice, project, task_factory, auto_memory_on
):
    auto_memory_on(alice)
    task_factory(project, alice, completed=True)
    client = signed_in_client(alice)
    response = client.post("/console/run", {"force": "0"})
    assert response.status_code == 302
    assert response["Location"] == "/console/log"
    log = client.get("/console/log")
    assert log.context["summary"]["extracted"] == 1
    assert 'id="run-result"' in log.content.decode()
    assert "summary" not in client.get("/console/log").context


def test_run_now_runs_only_the_users_tasks(
    signed_in_client, alice, bob, project, task_factory, auto_memory_on
):
    auto_memory_on(alice)
    auto_memory_on(bob)
    task_factory(project, bob, completed=True)
    client = signed_in_client(alice)
    client.post("/console/run", {"force": "1"})
    assert client.get("/console/log").context["summary"]["scanned"] == 0
    assert not AutoMemoryLog.objects.exists()


@pytest.mark.parametrize("force", ["2", "yes", "", "1\x00"])
def test_run_now_refuses_a_bad_force(signed_in_client, alice, force):
    response = signed_in_client(alice).post("/console/run", {"force": force})
    assert response.status_code == 400
    assert "did not run" in response.content.decode()


def test_run_now_is_post_with_csrf(signed_in_client, alice):
    assert signed_in_client(alice).get("/console/run").status_code == 405
    client = signed_in_client(alice, enforce_csrf=True)
    assert client.post("/console/run", {"force": "0"}).status_code == 403


def test_the_log_is_the_users_own(signed_in_client, alice, bob, three_rows):
    response = signed_in_client(bob).get("/console/log")
    assert response.status_code == 200
    assert response.context["entries"] == []
    assert "Your log is empty" in response.content.decode()


def test_the_log_is_paginated(signed_in_client, alice, project, task_factory, log_row_factory):
    for _ in range(LOG_PAGE_SIZE + 3):
        log_row_factory(task_factory(project, completed=True))
    client = signed_in_client(alice)
    first = client.get("/console/log")
    assert len(first.context["entries"]) == LOG_PAGE_SIZE
    assert 'rel="next"' in first.content.decode()
    second = client.get("/console/log?page=2&outcome=skipped")
    assert len(second.context["entries"]) == 3
    assert "outcome=skipped" in second.content.decode()  # the filter stays on page links


@pytest.mark.parametrize(
    "query",
    [
        "page=abc",
        "page=-1",
        "page=0",
        "page=99999",
        "page=" + "9" * 5000,
        "page=1.5",
        "page=%00",
        "outcome=bogus",
        "reason=bogus",
        "reason=%00",
        "outcome=skipped&outcome=error",
        "outcome=" + "x" * 10000,
        "unknown=1",
        "%ff%fe=%ff",
    ],
)
def test_malformed_query_strings_never_fail(signed_in_client, alice, three_rows, query):
    response = signed_in_client(alice).get("/console/log?" + query)
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert "was not understood" in response.content.decode()


@pytest.fixture
def run_rates(settings):
    """`run_rates(run="2/hour", run_force="1/hour")`: the API's run limits, for these tests."""

    def set_rates(**changed):
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {
                **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
                **changed,
            },
        }

    return set_rates


def test_run_now_counts_against_the_apis_run_limits(
    signed_in_client, api_client_for, alice, run_rates
):
    run_rates(run="3/hour", run_force="1/hour")
    client = signed_in_client(alice)
    assert client.post("/console/run", {"force": "1"}).status_code == 302
    refused = client.post("/console/run", {"force": "1"})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "too many forced sweeps" in refused.content.decode()
    # The console and the API share the counters: one more plain run is left, then none.
    api = api_client_for(alice)
    assert api.post("/users/me/auto-memory/run", {}, format="json").status_code == 200
    assert client.post("/console/run", {"force": "0"}).status_code == 429
    assert api.post("/users/me/auto-memory/run", {}, format="json").status_code == 429


def test_a_refused_run_is_shown_in_the_browser(signed_in_page, alice, run_rates):
    run_rates(run_force="1/hour")
    page = signed_in_page(alice, "/console/log")
    force = page.get_by_role("button", name="Run now, skip the waiting gates")
    force.click()
    expect(page.locator("#run-result")).to_contain_text("Sweep summary (waiting gates skipped)")
    page.get_by_role("button", name="Run now, skip the waiting gates").click()
    expect(page.locator("#run-result")).to_contain_text("too many forced sweeps")
    expect(page.get_by_role("alert")).to_contain_text("Try again in")


def test_the_log_page_costs_the_same_queries_for_any_page_length(
    signed_in_client, alice, project, task_factory, log_row_factory, memory_factory
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = signed_in_client(alice)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/console/log").status_code == 200
        return len(captured)

    log_row_factory(task_factory(project, completed=True))
    few = queries()
    for number in range(LOG_PAGE_SIZE):
        task = task_factory(project, completed=True)
        memory = memory_factory(
            project=project, source=MemorySource.AUTO, source_task=task, goal_key=f"goal {number}"
        )
        log_row_factory(task, outcome=Outcome.EXTRACTED, reason=Reason.NEW, memory=memory)
    assert queries() == few
