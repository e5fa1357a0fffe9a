"""A hijacked agent of the `command` executor, run by a real worker turn against a live API:
it looks for the control plane's secrets, its database and other tasks' files, and fails
at each; the task still completes and its memory tools still work.

In CI the sandbox must be bubblewrap (`.ci/run` installs it); elsewhere the bwrap tests skip
when it cannot run here. The last test shows what `WORKER_SANDBOX=none` leaves open.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from controlplane.models import TaskStatus
from worker import sandbox
from worker.executors.command import CommandExecutor

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = Path(__file__).with_name("hostile_agent.py")
BASE_DIR = Path(django_settings.BASE_DIR)


def bwrap_or_skip() -> None:
    problem = sandbox.bwrap_problem("bwrap")
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run agents in bubblewrap: {problem}", pytrace=False)
        pytest.skip(f"bubblewrap cannot run here: {problem}")


class Targets:
    """What a hijacked agent goes for, laid out as on a worker host."""

    def __init__(self, tmp_path: Path, task_root: Path) -> None:
        self.canary = "canary-" + secrets.token_hex(12)
        var = tmp_path / "var"
        var.mkdir()
        self.database = var / "controlplane.sqlite3"
        with sqlite3.connect(self.database) as connection:
            connection.execute("CREATE TABLE identity_memories (id INTEGER, content TEXT)")
        (var / "dev-secret-key").write_text(self.canary)
        other_room = task_root / "task-999999" / "work"
        other_room.mkdir(parents=True)
        (other_room / "notes.txt").write_text("another task's files")
        self.paths = [
            str(self.database),
            str(var / "dev-secret-key"),
            str(other_room),
            str(other_room / "notes.txt"),
            str(BASE_DIR / "controlplane" / "settings.py"),
            str(BASE_DIR / "manage.py"),
            str(BASE_DIR / "var"),
            str(BASE_DIR / ".env"),
            # relative to the agent's working folder (<root>/task-<id>/work): tmp_path/var
            "../../../var/controlplane.sqlite3",
        ]

        # A service of the worker's host that trusts whoever connects (as PostgreSQL with
        # `trust`, or a Redis without a password, would), and the real ones where they run.
        self.host_service = socket.create_server(("127.0.0.1", 0))
        self.services = [
            ["127.0.0.1", self.host_service.getsockname()[1]],
            ["127.0.0.1", 5432],
            ["127.0.0.1", 6379],
        ]
        self.database_url = worker_database_url()

    def orders(self, approve_url: str) -> str:
        return json.dumps(
            {
                "paths": self.paths,
                "canary": self.canary,
                "approve_url": approve_url,
                "database_url": self.database_url,
                "services": self.services,
            }
        )


def worker_database_url() -> str:
    """The worker's own database URL, as an attacker who read the deployment's docs would
    write it ("" on SQLite, which is a file)."""
    database = connection.settings_dict
    if connection.vendor != "postgresql":
        return ""
    user = database.get("USER") or "postgres"
    host = database.get("HOST") or "127.0.0.1"
    if host.startswith("/"):
        host = "127.0.0.1"
    return f"postgresql://{user}@{host}:{database.get('PORT') or 5432}/{database['NAME']}"


@pytest.fixture
def hostile_setup(
    tmp_path, settings, monkeypatch, live_server, project, alice, memory_factory, auto_memory_on
):
    task_root = tmp_path / "tasks"
    settings.WORKER_TASK_ROOT = str(task_root)
    targets = Targets(tmp_path, task_root)
    # The worker's environment holds the control plane's secrets (here: the canary).
    for name in (
        "SECRET_KEY",
        "CACHE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "AUTOMEMORY_OPENAI_BASE_URL",
        "AUTOMEMORY_OPENAI_API_KEY",
        "SOME_OPERATOR_SETTING",
    ):
        monkeypatch.setenv(name, f"{name}-{targets.canary}")
    # A process of the host started with a secret in its environment, as the worker was.
    holder = subprocess.Popen(["sleep", "120"], env={"SECRET_KEY": targets.canary})
    settings.WORKER_COMMAND = shlex.join([sys.executable, "-I", str(HOSTILE)])
    settings.WORKER_MEMORY_TOOLS = True
    settings.WORKER_MEMORY_API_URL = live_server.url
    auto_memory_on(alice)
    memory = memory_factory(project=project, content="Deploy with make deploy; never on Fridays.")
    yield targets, memory, live_server
    holder.kill()
    holder.wait()
    targets.host_service.close()


def run_hostile_task(worker_factory, task_factory, project, alice, targets, approve_url):
    task = task_factory(project, alice, prompt=targets.orders(approve_url))
    worker_factory(CommandExecutor()).run_once()
    task.refresh_from_db()
    assert task.status == TaskStatus.COMPLETED, task.failure_reason
    return json.loads(task.result_text)


def test_a_hijacked_command_agent_reaches_nothing_of_the_control_plane(
    hostile_setup, settings, worker_factory, task_factory, project, alice
):
    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    targets, memory, server = hostile_setup

    report = run_hostile_task(
        worker_factory,
        task_factory,
        project,
        alice,
        targets,
        approve_url=f"{server.url}/memories/{memory.pk}/approve",
    )

    assert not report["canary_in_env"]
    assert not {
        "SECRET_KEY",
        "DATABASE_URL",
        "CACHE_URL",
        "AUTOMEMORY_OPENAI_BASE_URL",
        "AUTOMEMORY_OPENAI_API_KEY",
        "SOME_OPERATOR_SETTING",
    } & set(report["env_names"])
    assert report["proc_environ_hits"] == []
    assert report["readable"] == dict.fromkeys(targets.paths, False)
    assert report["sqlite_opened"] == []
    # Its network reaches its memory tools and nothing else of the host: not the database
    # with the worker's own URL, not a service that trusts the host, directly or by proxy.
    assert report["postgres"].startswith("refused")
    assert all(result.startswith("refused") for result in report["services"].values())
    assert set(report["proxied"].values()) == {"HTTP/1.1 403 Forbidden"}
    # Its own tools still work, with its key only; the key approves nothing.
    assert report["memory_search"]["status"] == 200
    assert [m["id"] for m in report["memory_search"]["body"]["memories"]] == [memory.pk]
    assert report["approve_status"] in (401, 403)


def test_an_operator_hands_an_agent_the_names_it_needs_and_nothing_else(
    hostile_setup, settings, worker_factory, task_factory, project, alice
):
    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    settings.WORKER_AGENT_ENV = [
        "SOME_OPERATOR_SETTING",
        "SECRET_KEY",
        "AUTOMEMORY_OPENAI_BASE_URL",
        "AUTOMEMORY_OPENAI_API_KEY",
    ]
    targets, _memory, server = hostile_setup

    report = run_hostile_task(
        worker_factory, task_factory, project, alice, targets, approve_url=server.url
    )

    assert "SOME_OPERATOR_SETTING" in report["env_names"]
    # a control-plane secret's name never passes, even listed: nor the memory model's
    assert not {
        "SECRET_KEY",
        "AUTOMEMORY_OPENAI_BASE_URL",
        "AUTOMEMORY_OPENAI_API_KEY",
    } & set(report["env_names"])
    assert {"PATH", "HOME", "TMPDIR", "CONTROLPLANE_TASK_ID", "CONTROLPLANE_MEMORY_TOKEN"} <= set(
        report["env_names"]
    )


def test_without_a_sandbox_the_environment_is_still_allow_listed_but_files_are_not_hidden(
    hostile_setup, settings, worker_factory, task_factory, project, alice
):
    settings.WORKER_SANDBOX = "none"
    targets, _memory, server = hostile_setup

    report = run_hostile_task(
        worker_factory, task_factory, project, alice, targets, approve_url=server.url
    )

    assert not report["canary_in_env"]
    assert "SECRET_KEY" not in report["env_names"]
    # What `none` leaves open: the host's files, the worker's own /proc entry, its network.
    assert report["readable"][str(targets.database)]
    assert str(targets.database) in report["sqlite_opened"]
    assert report["proc_environ_hits"]
    host, port = targets.services[0]
    assert report["services"][f"{host}:{port}"] == "open"


def test_a_sandbox_on_the_host_s_network_hides_files_but_not_the_host_s_services(
    hostile_setup, settings, worker_factory, task_factory, project, alice
):
    bwrap_or_skip()
    settings.WORKER_SANDBOX = "bwrap"
    settings.WORKER_SANDBOX_NETWORK = "host"
    targets, _memory, server = hostile_setup

    report = run_hostile_task(
        worker_factory, task_factory, project, alice, targets, approve_url=server.url
    )

    assert report["readable"] == dict.fromkeys(targets.paths, False)
    host, port = targets.services[0]
    assert report["services"][f"{host}:{port}"] == "open"
    if targets.database_url:
        # The test database trusts this host (as CI's does): the worker's URL is enough.
        assert report["postgres"] == "connected"
