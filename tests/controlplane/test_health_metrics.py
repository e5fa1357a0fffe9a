"""Health, readiness and the Prometheus scrape, read with prometheus_client's own parser."""

import os
import re
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from automemory.models import AutoMemoryLog, AutoMemorySettings
from automemory.services.extraction.sweep import process_auto_memories
from automemory.services.redactor import redact
from controlplane.models import Quota, Task, TaskStatus
from worker.executors import ExecutionResult
from worker.executors.echo import EchoExecutor
from worker.loop import Worker

BASE_DIR = Path(django_settings.BASE_DIR)
OPERATIONS_DOC = BASE_DIR / "docs" / "operations.md"
TOKEN = "scrape-token-for-tests"
SECRET = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"


@pytest.fixture
def metrics_on(settings):
    settings.METRICS_ENABLED = True
    settings.METRICS_BEARER_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1", "::1"]
    return settings


def scrape(client: Client | None = None) -> str:
    response = (client or Client()).get(
        "/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", REMOTE_ADDR="127.0.0.1"
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


def documented_metrics() -> set[str]:
    """Names in the first column of the metric tables of docs/operations.md."""
    return set(re.findall(r"^\| `([a-z_]+)` \|", OPERATIONS_DOC.read_text(), flags=re.M))


# --- Health and readiness --------------------------------------------------------------------


def test_healthz_answers_without_touching_the_database(client):
    # No database access is allowed in this test: a query would raise.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_200_when_the_database_answers_and_is_migrated(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok"}}


@pytest.mark.django_db
def test_readyz_is_503_while_a_migration_is_not_applied(client):
    MigrationRecorder.Migration.objects.filter(app="worker", name="0001_initial").delete()
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["migrations"] == "1 not applied: worker.0001_initial"


def test_readyz_is_503_when_the_database_is_unreachable_and_healthz_still_200():
    script = (
        "from django.test import Client; c = Client(); "
        "r = c.get('/readyz'); print(r.status_code, r.json()['checks']); "
        "print(c.get('/healthz').status_code)"
    )
    env = {
        **os.environ,
        "DEBUG": "True",
        # Nothing listens on port 9 of the loopback: the connection is refused at once.
        "DATABASE_URL": "postgres://postgres@127.0.0.1:9/unreachable",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in done.stdout.splitlines() if line and "imported" not in line]
    assert lines == ["503 {'database': 'unreachable (OperationalError)'}", "200"], done.stderr


@pytest.mark.django_db
def test_probes_and_metrics_need_no_login_and_are_never_throttled(client, settings, metrics_on):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
        "DEFAULT_THROTTLE_RATES": {"anon": "1/hour"},
    }
    for _ in range(5):
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        scrape(client)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
@pytest.mark.django_db
def test_probes_refuse_writes(client, metrics_on, path):
    assert client.post(path, REMOTE_ADDR="127.0.0.1").status_code == 405


# --- Access to /metrics ----------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_are_off_by_default(client):
    assert django_settings.METRICS_ENABLED is False
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Token {TOKEN}", f"Bearer {TOKEN}x", "Bearer", f"{TOKEN}"],
)
def test_metrics_without_the_bearer_token_are_refused(client, metrics_on, header):
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"controlplane_" not in response.content


@pytest.mark.django_db
def test_metrics_with_the_bearer_token_are_served(client, metrics_on):
    assert "controlplane_queue_depth" in scrape(client)


@pytest.mark.django_db
def test_metrics_from_an_address_outside_the_allowed_list_are_refused(client, metrics_on):
    response = client.get(
        "/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", REMOTE_ADDR="203.0.113.7"
    )
    assert response.status_code == 403


@pytest.mark.django_db
def test_allowed_networks_and_an_empty_list_let_other_addresses_in(client, metrics_on):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    metrics_on.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", **auth).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="11.1.2.3", **auth).status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="not-an-ip", **auth).status_code == 403
    metrics_on.METRICS_ALLOWED_IPS = []
    assert client.get("/metrics", REMOTE_ADDR="198.51.100.1", **auth).status_code == 200


@pytest.mark.django_db
def test_without_a_token_setting_the_allowed_addresses_alone_decide(client, metrics_on):
    metrics_on.METRICS_BEARER_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.1").status_code == 403


# --- What the scrape holds -------------------------------------------------------------------


@pytest.mark.django_db
def test_every_documented_metric_is_in_the_scrape_and_every_one_there_is_documented(
    client, metrics_on
):
    client.get("/healthz")  # request metrics exist once a request was answered
    families = {family.name for family in text_string_to_metric_families(scrape(client))}
    documented = documented_metrics()
    assert len(documented) == 27
    # The parser names a counter family without its `_total` suffix.
    scraped = {
        name for name in families if name.startswith(("controlplane_", "worker_", "automemory_"))
    }
    assert {name.removesuffix("_total") for name in documented} == scraped


@pytest.mark.django_db
def test_request_metrics_count_by_route_not_path(client, metrics_on, project, task_factory):
    before = samples(scrape(client))
    client.get("/healthz")
    client.get(f"/tasks/{task_factory(project).pk}")  # anonymous: 401
    client.get("/no/such/page")
    after = samples(scrape(client))

    def moved(**labels):
        name = "controlplane_http_requests_total"
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved(method="GET", route="healthz", status="200") == 1
    assert moved(method="GET", route="tasks/<str:task_id>", status="401") == 1
    assert moved(method="GET", route="unmatched", status="404") == 1
    count = "controlplane_http_request_duration_seconds_count"
    assert value(after, count, method="GET", route="healthz") >= 1


@pytest.mark.django_db
def test_queue_gauges_come_from_the_database(client, metrics_on, project, task_factory):
    now = timezone.now()
    for minutes in (3, 1):
        task = task_factory(project)
        Task.objects.filter(pk=task.pk).update(queued_at=now - timedelta(minutes=minutes))
    task_factory(project, status=TaskStatus.RUNNING)
    task_factory(project, completed=True)

    scraped = samples(scrape(client))

    assert value(scraped, "controlplane_queue_depth") == 2
    assert value(scraped, "controlplane_tasks", status="queued") == 2
    assert value(scraped, "controlplane_tasks", status="running") == 1
    assert 180 <= value(scraped, "controlplane_queue_oldest_age_seconds") < 240


@pytest.mark.django_db
def test_an_empty_queue_has_no_age(client, metrics_on):
    scraped = samples(scrape(client))
    assert value(scraped, "controlplane_queue_depth") == 0
    assert value(scraped, "controlplane_queue_oldest_age_seconds") == 0


# --- Counters that move ------------------------------------------------------------------------


class FailingExecutor:
    name = "failing"

    def execute(self, request, *, control):
        return ExecutionResult.failed("exit status 3")


def run_worker(executor) -> None:
    Worker(
        executor=executor, worker_id="metrics-test", heartbeat_seconds=0, poll_interval=0
    ).run_once()


@pytest.mark.django_db(transaction=True)
def test_a_task_run_a_sweep_and_an_injection_move_their_counters(
    client, metrics_on, alice, project, task_factory
):
    AutoMemorySettings.objects.create(
        user=alice,
        generate_memories=True,
        use_memories=True,
        idle_seconds=0,
        min_duration_seconds=0,
        min_result_chars=20,
    )
    before = samples(scrape(client))
    task_factory(
        project,
        alice,
        prompt=f"Document the deploy steps\nUse OPENAI_API_KEY={SECRET} for the smoke test. "
        + "Then describe each step of the release checklist in detail. " * 3,
    )
    run_worker(EchoExecutor())  # runs the task, then the sweep extracts its memory
    task_factory(project, alice, prompt="Now ship it " * 5)
    run_worker(EchoExecutor())  # this one starts with the memory injected
    after = samples(scrape(client))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("worker_task_claims_total", executor="echo") == 2
    assert moved("worker_task_completions_total", executor="echo") == 2
    assert moved("worker_task_failures_total", executor="echo") == 0
    assert moved("automemory_sweeps_total", scope="all") == 2
    logged = AutoMemoryLog.objects.filter(outcome="extracted", reason="new").count()
    assert logged >= 1
    assert moved("automemory_extractions_total", outcome="extracted", reason="new") == logged
    assert moved("automemory_injections_total") == 1
    assert moved("automemory_injected_memories_total", scope="project") == 1
    assert moved("automemory_injected_memories_total", scope="user") == 0
    assert moved("automemory_redaction_calls_total") >= 1
    assert (
        sum(
            after[key] - before.get(key, 0.0)
            for key in after
            if key[0] == "automemory_redactions_total"
        )
        >= 1
    )


@pytest.mark.django_db
def test_failures_refusals_and_recoveries_are_counted(
    client, metrics_on, alice, bob, project, task_factory
):
    before = samples(scrape(client))
    task_factory(project, alice)
    run_worker(FailingExecutor())
    Quota.objects.create(user=bob, monthly_limit_usd=Decimal("0"))
    task_factory(project, bob)
    run_worker(EchoExecutor())
    stale = task_factory(project, status=TaskStatus.RUNNING, worker_id="gone")
    Task.objects.filter(pk=stale.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    worker = Worker(executor=EchoExecutor(), worker_id="recoverer", heartbeat_seconds=0)
    assert worker.recover_stale() == [stale.pk]
    after = samples(scrape(client))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("worker_task_claims_total", executor="failing") == 1
    assert moved("worker_task_failures_total", executor="failing") == 1
    assert moved("worker_task_completions_total", executor="failing") == 0
    assert moved("worker_quota_refusals_total") == 1
    assert moved("worker_task_recoveries_total") == 1


@pytest.mark.django_db
def test_redactions_are_counted_per_call_and_per_rule_fired(client, metrics_on):
    before = samples(scrape(client))
    redact(f"key one {SECRET} and key two {SECRET[:-1]}Q")
    redact("nothing secret in here")
    after = samples(scrape(client))
    fired = {
        dict(labels)["rule"]: after[(name, labels)] - before.get((name, labels), 0.0)
        for name, labels in after
        if name == "automemory_redactions_total"
    }
    assert (
        value(after, "automemory_redaction_calls_total")
        - value(before, "automemory_redaction_calls_total")
        == 2
    )
    assert sum(fired.values()) == 2
    assert len([rule for rule, count in fired.items() if count]) == 1


@pytest.mark.django_db
def test_a_sweep_counts_each_attempt_by_outcome_and_reason_as_logged(
    client, metrics_on, alice, bob, project, task_factory
):
    AutoMemorySettings.objects.create(user=alice, generate_memories=True)
    task_factory(project, alice, completed=True, prompt="Fix the flaky login test")
    task_factory(project, bob, completed=True)  # bob never turned generation on
    before = samples(scrape(client))

    process_auto_memories()
    process_auto_memories(user=alice)  # nothing new: a sweep that examines nothing
    after = samples(scrape(client))

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("automemory_sweeps_total", scope="all") == 1
    assert moved("automemory_sweeps_total", scope="user") == 1
    logged = {(row.outcome, row.reason) for row in AutoMemoryLog.objects.all()}
    assert logged == {("extracted", "new"), ("skipped", "generate_disabled")}
    for outcome, reason in logged:
        assert moved("automemory_extractions_total", outcome=outcome, reason=reason) == 1
