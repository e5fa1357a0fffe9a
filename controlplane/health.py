"""Liveness and readiness probes: plain Django views, no authentication, no throttling.

`/healthz` answers from the process alone (no database), so a restart is only asked for when
the process itself is stuck. `/readyz` answers 200 only when the database is reachable and
every migration on disk is applied, so a load balancer sends no traffic to a process that
would fail (a database outage, a deploy whose `migrate` has not run yet).
"""

from __future__ import annotations

from functools import cache

from django.db import DatabaseError, connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """`GET /healthz`: 200 while the process can answer a request."""
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """`GET /readyz`: 200 if the database answers and has no unapplied migration, else 503."""
    problems = readiness_problems()
    body = {"status": "unavailable" if problems else "ok", "checks": problems or {"database": "ok"}}
    return JsonResponse(body, status=503 if problems else 200)


def readiness_problems() -> dict[str, str]:
    """What keeps this process from serving: {} when ready. One query when it is."""
    try:
        pending = migrations_pending()
    except DatabaseError as exc:
        return {"database": f"unreachable ({type(exc).__name__})"}
    if pending:
        more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
        shown = ", ".join(pending[:5]) + more
        return {"migrations": f"{len(pending)} not applied: {shown}"}
    return {}


def migrations_pending() -> list[str]:
    """`app.name` of each migration on disk that the database has not recorded as applied."""
    applied = set(MigrationRecorder(connection).applied_migrations())
    pending = []
    for key, replaces in _migrations_on_disk():
        if key in applied or (replaces and all(r in applied for r in replaces)):
            continue
        pending.append(".".join(key))
    return pending


@cache
def _migrations_on_disk() -> tuple[tuple[tuple[str, str], tuple[tuple[str, str], ...]], ...]:
    """Each migration of the graph with what it replaces; read once (a deploy restarts us)."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return tuple(
        (key, tuple(tuple(r) for r in (graph.nodes[key].replaces or ())))
        for key in sorted(graph.nodes)
    )
