"""Start-up checks of the worker settings, shown by every command (`manage.py check`).

Warnings rather than errors: the API server and migrations do not need a worker, and the
worker itself refuses to start with an unknown executor.
"""

import shlex
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register()
def worker_settings_check(app_configs=None, **kwargs) -> list[Warning]:
    from worker.codex.checks import codex_settings_problems
    from worker.executors import EXECUTORS

    problems = []
    name = settings.WORKER_EXECUTOR
    if name not in EXECUTORS:
        known = ", ".join(sorted(EXECUTORS))
        problems.append(
            Warning(
                f"WORKER_EXECUTOR {name!r} is not an executor (known: {known}).", id="worker.W001"
            )
        )
    if name == "command":
        try:
            argv = shlex.split(settings.WORKER_COMMAND)
        except ValueError as exc:
            argv = None
            problems.append(Warning(f"WORKER_COMMAND cannot be parsed: {exc}", id="worker.W002"))
        if argv == []:
            problems.append(
                Warning(
                    "WORKER_EXECUTOR is 'command' but WORKER_COMMAND is empty.", id="worker.W002"
                )
            )
    problems += codex_settings_problems()
    if settings.WORKER_STALE_AFTER_SECONDS <= 2 * settings.WORKER_HEARTBEAT_SECONDS:
        problems.append(
            Warning(
                "WORKER_STALE_AFTER_SECONDS should be well above WORKER_HEARTBEAT_SECONDS, or "
                "live tasks may be taken for stale and run twice.",
                id="worker.W003",
            )
        )
    retry = settings.WORKER_FINISH_RETRY_SECONDS
    if retry < 0:
        problems.append(Warning("WORKER_FINISH_RETRY_SECONDS must be 0 or more.", id="worker.W006"))
    elif retry < settings.WORKER_STALE_AFTER_SECONDS:
        problems.append(
            Warning(
                "WORKER_FINISH_RETRY_SECONDS is below WORKER_STALE_AFTER_SECONDS: a worker "
                "that finished a turn during a database outage may drop its result while the "
                "task is still its own, and the task then runs again.",
                id="worker.W006",
            )
        )
    return problems


@register()
def worker_sandbox_check(app_configs=None, **kwargs) -> list[Warning]:
    """The agent's world: a known sandbox mode, no control-plane secret handed to agents, no
    control-plane folder shown to them."""
    from worker.egress import destination_parse
    from worker.sandbox import CONTROL_PLANE_SECRET_NAMES, NETWORK_MODES, SANDBOX_MODES

    problems = []
    if settings.WORKER_SANDBOX_NETWORK not in NETWORK_MODES:
        problems.append(
            Warning(
                f"WORKER_SANDBOX_NETWORK {settings.WORKER_SANDBOX_NETWORK!r} is not one of "
                f"{', '.join(NETWORK_MODES)}; agents get an isolated network.",
                id="worker.W012",
            )
        )
    services = _control_plane_services()
    for entry in settings.WORKER_AGENT_EGRESS:
        try:
            destination = destination_parse(entry)
        except ValueError as exc:
            problems.append(
                Warning(f"WORKER_AGENT_EGRESS: {exc}; agents cannot reach it.", id="worker.W013")
            )
            continue
        if destination in services:
            problems.append(
                Warning(
                    f"WORKER_AGENT_EGRESS lets agents reach {entry}, the control plane's "
                    f"{services[destination]}.",
                    hint="Agents reach memory through the memory tools; never list the "
                    "database or the cache.",
                    id="worker.W014",
                )
            )
    if settings.WORKER_SANDBOX not in SANDBOX_MODES:
        problems.append(
            Warning(
                f"WORKER_SANDBOX {settings.WORKER_SANDBOX!r} is not one of "
                f"{', '.join(SANDBOX_MODES)}; agents run as with 'auto'.",
                id="worker.W007",
            )
        )
    secrets = sorted(set(settings.WORKER_AGENT_ENV) & CONTROL_PLANE_SECRET_NAMES)
    if secrets:
        problems.append(
            Warning(
                f"WORKER_AGENT_ENV names the control plane's own secrets ({', '.join(secrets)}): "
                "they are never handed to agents.",
                id="worker.W008",
            )
        )
    checkout, var = Path(settings.BASE_DIR).resolve(), Path(settings.VAR_DIR).resolve()
    for name in ("WORKER_SANDBOX_READ_ONLY", "WORKER_SANDBOX_WRITABLE"):
        for raw in getattr(settings, name):
            shown = Path(raw).resolve()
            holds_private = shown == checkout or shown in checkout.parents
            if holds_private or shown == var or var in shown.parents:
                problems.append(
                    Warning(
                        f"{name} shows agents {raw}, which holds the control plane's own files "
                        "(its settings, var/, the SQLite database): name a folder of the "
                        "agent's own instead.",
                        id="worker.W009",
                    )
                )
    return problems


@register(Tags.security, deploy=True)
def worker_isolation_deploy_check(app_configs=None, **kwargs) -> list[Warning]:
    """`check --deploy`: agents that run unsandboxed, and a database that agents on a worker
    host could reach without a password."""
    from worker.sandbox import sandbox_mode

    problems = []
    try:
        mode = sandbox_mode()
    except Exception as exc:
        mode = f"unavailable ({exc})"
    if mode != "bwrap":
        problems.append(
            Warning(
                f"Agents run without a sandbox (WORKER_SANDBOX={settings.WORKER_SANDBOX}, "
                f"in effect: {mode}): a hijacked agent can read every file the worker can, "
                "the SQLite database and other tasks' folders included.",
                hint="Install bubblewrap (Debian: apt-get install bubblewrap) and leave "
                "WORKER_SANDBOX at auto or bwrap.",
                id="worker.W010",
            )
        )
    shared_network = mode != "bwrap" or settings.WORKER_SANDBOX_NETWORK != "isolated"
    if mode == "bwrap" and shared_network:
        problems.append(
            Warning(
                "Agents share the worker host's network (WORKER_SANDBOX_NETWORK="
                f"{settings.WORKER_SANDBOX_NETWORK}): a hijacked agent reaches every service "
                "the host reaches, the database and the cache included.",
                hint="Leave WORKER_SANDBOX_NETWORK at isolated and list what agents need in "
                "WORKER_AGENT_EGRESS.",
                id="worker.W015",
            )
        )
    for alias, database in settings.DATABASES.items():
        host = database.get("HOST") or ""
        tcp = host and not host.startswith("/")
        if (
            shared_network
            and database["ENGINE"].endswith("postgresql")
            and tcp
            and not database.get("PASSWORD")
        ):
            problems.append(
                Warning(
                    f"Database {alias!r} is reached at {host} without a password: agents "
                    "share the worker "
                    "host's network, and a server that trusts that host lets them in "
                    "without the URL.",
                    hint="Give the database user a password and require it (scram-sha-256 "
                    "in pg_hba.conf) for the worker hosts' addresses.",
                    id="worker.W011",
                )
            )
    return problems


def _control_plane_services() -> dict:
    """The `host:port` of the control plane's database and cache servers, by what they are."""
    from worker.egress import Destination

    services = {}
    for alias, database in settings.DATABASES.items():
        host = database.get("HOST") or ""
        if host and not host.startswith("/"):
            port = int(database.get("PORT") or 5432)
            services[Destination(host=host.lower(), port=port)] = f"database {alias!r}"
    for alias, cache in settings.CACHES.items():
        locations = cache.get("LOCATION") or []
        for location in [locations] if isinstance(locations, str) else locations:
            parts = urlsplit(str(location))
            if parts.scheme in ("redis", "rediss") and parts.hostname:
                port = parts.port or 6379
                services[Destination(host=parts.hostname.lower(), port=port)] = f"cache {alias!r}"
    return services
