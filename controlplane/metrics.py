"""Prometheus metrics of the host control plane, and the `/metrics` endpoint.

Counters and histograms live in prometheus_client's default registry; each app defines its
own in its `metrics` module (`automemory.metrics`, `worker.metrics`), which the endpoint
imports by name, so this module never imports them. With `PROMETHEUS_MULTIPROC_DIR` set
(several gunicorn processes, workers on the same host) every process writes its samples to
that directory and a scrape adds them up. The queue gauges are read from the database at
scrape time, so any one API process reports the same figures (docs/operations.md).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules
from django.views.decorators.http import require_safe
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controlplane.models import Task, TaskStatus

disable_created_metrics()  # no `_created` twin beside every counter and histogram

http_requests = Counter(
    "controlplane_http_requests",
    "HTTP requests answered, by method, URL route and status code.",
    ["method", "route", "status"],
)
http_request_duration = Histogram(
    "controlplane_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and URL route.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

throttle_cache_failures = Counter(
    "controlplane_throttle_cache_failures",
    "Requests let through unthrottled because the throttle cache could not be reached.",
)


def request_metrics_middleware(get_response: Callable) -> Callable:
    """Count every response and time it, labelled by the URL pattern (not the path)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in _KNOWN_METHODS else "other"
        http_request_duration.labels(method, route).observe(time.perf_counter() - started)
        http_requests.labels(method, route, str(response.status_code)).inc()
        return response

    return middleware


_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class QueueCollector(Collector):
    """Task gauges read from the database at each scrape: two index-served queries."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # One query per status, each matching its partial index's condition exactly, so every
        # database reads the index of pending tasks only (an IN over both would scan history).
        queue = Task.objects.filter(status=TaskStatus.QUEUED).aggregate(
            n=Count("id"), oldest=Min("queued_at")
        )
        running = Task.objects.filter(status=TaskStatus.RUNNING).count()
        by_status = GaugeMetricFamily(
            "controlplane_tasks",
            "Tasks now in each live status (queued, running).",
            labels=["status"],
        )
        by_status.add_metric([TaskStatus.QUEUED.value], queue["n"])
        by_status.add_metric([TaskStatus.RUNNING.value], running)
        yield by_status
        yield GaugeMetricFamily(
            "controlplane_queue_depth", "Tasks waiting in the queue.", value=queue["n"]
        )
        oldest = queue["oldest"]
        age = (timezone.now() - oldest).total_seconds() if oldest is not None else 0.0
        yield GaugeMetricFamily(
            "controlplane_queue_oldest_age_seconds",
            "Seconds the oldest queued task has waited (0 when the queue is empty).",
            value=max(age, 0.0),
        )


_database_registry = CollectorRegistry(auto_describe=False)
_database_registry.register(QueueCollector())
_apps_discovered = False


def metrics_scrape() -> bytes:
    """The text exposition: every app's counters (added up across processes) and the queue."""
    _discover_app_metrics()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return generate_latest(registry) + generate_latest(_database_registry)


def metrics_access_problem(
    *, remote_addr: str, authorization: str, enabled: bool | None = None
) -> tuple[int, str] | None:
    """Why a scrape from `remote_addr` carrying `authorization` may not read the metrics, as
    (HTTP status, text), or None if it may. Shared by `/metrics` and a worker's own endpoint.

    Off unless `enabled` (default METRICS_ENABLED; a worker's endpoint is on by having a
    port); then the client address must be in METRICS_ALLOWED_IPS (empty: any address) and,
    when METRICS_BEARER_TOKEN is set, the request must carry it.
    """
    if not (settings.METRICS_ENABLED if enabled is None else enabled):
        return 404, "Not found\n"
    allowed = _allowed_networks(tuple(settings.METRICS_ALLOWED_IPS))
    if allowed and not _address_in(remote_addr, allowed):
        return 403, "Forbidden\n"
    token = settings.METRICS_BEARER_TOKEN
    if token:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return 401, "Unauthorized\n"
    return None


def metrics_access_refusal(request: HttpRequest) -> HttpResponse | None:
    """The response refusing this request the metrics (`metrics_access_problem`), or None."""
    problem = metrics_access_problem(
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        authorization=request.headers.get("Authorization", ""),
    )
    if problem is None:
        return None
    status, text = problem
    response = HttpResponse(text, status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def process_counters_scrape() -> bytes:
    """This process's own counters (every app's, no queue gauges): a worker's own endpoint."""
    _discover_app_metrics()
    return generate_latest(REGISTRY)


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: Prometheus text format, behind `metrics_access_refusal`."""
    refusal = metrics_access_refusal(request)
    if refusal is not None:
        return refusal
    response = HttpResponse(metrics_scrape(), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response


def _discover_app_metrics() -> None:
    """Import every app's `metrics` module, so its counters show before they first move."""
    global _apps_discovered
    if not _apps_discovered:
        autodiscover_modules("metrics")
        _apps_discovered = True


_networks_cache: dict[tuple[str, ...], list] = {}


def _allowed_networks(entries: tuple[str, ...]) -> list:
    if entries not in _networks_cache:
        _networks_cache[entries] = [ipaddress.ip_network(e, strict=False) for e in entries if e]
    return _networks_cache[entries]


def _address_in(address: str, networks: list) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in networks)
