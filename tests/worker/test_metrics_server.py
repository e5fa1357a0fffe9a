"""A worker's own metrics endpoint (WORKER_METRICS_PORT): a real `run_worker` process scraped
over HTTP, and the endpoint's access rules, which are the API's `/metrics` rules."""

import http.client
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.models import TaskStatus
from worker.metrics_server import MetricsServer

from .conftest import wait_for


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(port: int, path: str = "/metrics", method: str = "GET", **headers: str):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, headers=headers)
    response = connection.getresponse()
    response.body = response.read().decode()
    connection.close()
    return response


def samples(text: str) -> dict:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.django_db(transaction=True)
def test_a_worker_serves_its_own_counters_without_an_api_process(shared_db, worker_processes):
    port = free_port()
    task_ids = shared_db.seed_tasks(2)
    worker_processes.start(
        shared_db,
        "--worker-id",
        "w-metrics",
        "--poll-interval",
        "0.2",
        env={"WORKER_METRICS_PORT": str(port), "WORKER_METRICS_ADDR": "127.0.0.1"},
    )
    wait_for(
        lambda: shared_db.tasks().filter(pk__in=task_ids, status=TaskStatus.COMPLETED).count() == 2,
        timeout=60,
        message=worker_processes.logs(),
    )
    scraped: dict = {}

    def swept() -> bool:  # the round's sweep counts itself after the tasks' counters
        response = fetch(port)
        assert response.status == 200, response.body
        assert response.getheader("Content-Type").startswith("text/plain; version=")
        scraped.clear()
        scraped.update(samples(response.body))
        return scraped.get(("automemory_sweeps_total", (("scope", "all"),)), 0) >= 1

    wait_for(swept, timeout=60, message=worker_processes.logs())
    # the names an API process's /metrics uses for the same counters
    assert scraped[("worker_task_claims_total", (("executor", "echo"),))] == 2
    assert scraped[("worker_task_completions_total", (("executor", "echo"),))] == 2
    assert ("process_resident_memory_bytes", ()) in scraped  # this process's own
    assert not [name for name, _ in scraped if name.startswith("controlplane_queue")]
    assert not [name for name, _ in scraped if name.endswith("_created")]
    assert fetch(port, "/other").status == 404


@pytest.fixture
def endpoint(settings):
    server = MetricsServer(port=0, addr="127.0.0.1")
    port = server.start()
    yield port
    server.stop()


def test_it_serves_without_metrics_enabled_since_the_port_turns_it_on(endpoint, settings):
    settings.METRICS_ENABLED = False
    response = fetch(endpoint)
    assert response.status == 200
    assert "# TYPE worker_task_claims_total counter" in response.body


def test_an_address_outside_the_allowed_networks_is_refused(endpoint, settings):
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert fetch(endpoint).status == 403
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8", "127.0.0.0/8"]
    assert fetch(endpoint).status == 200


def test_a_scrape_without_the_bearer_token_is_refused(endpoint, settings):
    settings.METRICS_BEARER_TOKEN = "s3cret-scrape-token"
    refused = fetch(endpoint)
    assert refused.status == 401
    assert refused.getheader("WWW-Authenticate") == 'Bearer realm="metrics"'
    assert fetch(endpoint, Authorization="Bearer wrong").status == 401
    assert fetch(endpoint, Authorization="Bearer s3cret-scrape-token").status == 200


def test_only_get_and_head_are_answered(endpoint):
    assert fetch(endpoint, method="POST").status == 405
    head = fetch(endpoint, method="HEAD")
    assert (head.status, head.body) == (200, "")


def test_a_port_in_use_stops_the_worker_at_start(settings, db):
    from django.core.management import CommandError, call_command

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings.WORKER_METRICS_PORT = taken.getsockname()[1]
        settings.WORKER_METRICS_ADDR = "127.0.0.1"
        with pytest.raises(CommandError, match=r"cannot serve metrics on 127\.0\.0\.1:"):
            call_command("run_worker", "--once")
