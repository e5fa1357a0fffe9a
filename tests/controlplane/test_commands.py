"""Management commands and the process supervisor behind `make run`."""

import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from controlplane.models import ApiToken, Membership, Project
from controlplane.services.demo import DEMO_TOKENS_KEPT, demo_password
from controlplane.services.tokens import token_key_hash
from controlplane.supervisor import Supervisor

User = get_user_model()


def run(*args) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db
class TestCreateUser:
    def test_it_creates_a_user_and_prints_a_new_token_last(self):
        lines = run("create_user", "dana")

        user = User.objects.get(username="dana")
        token = ApiToken.objects.get(user=user)
        assert token.name == "cli" and token.key_hash == token_key_hash(lines[-1])
        assert lines[-1] not in "\n".join(lines[:-1])
        assert not user.is_staff
        assert not user.has_usable_password()

    def test_it_finds_an_existing_user_and_mints_another_token(self, alice, client):
        first = run("create_user", "alice")[-1]
        second = run("create_user", "alice")[-1]

        assert first != second
        assert ApiToken.objects.filter(user=alice, name="cli").count() == 2
        assert User.objects.filter(username="alice").count() == 1
        for key in (first, second):
            response = client.get("/users/me/quota", HTTP_AUTHORIZATION=f"Token {key}")
            assert response.status_code == 200

    def test_staff_flag_makes_staff(self, alice):
        run("create_user", "alice", "--staff")

        alice.refresh_from_db()
        assert alice.is_staff

    def test_the_token_works_on_the_api(self, client):
        token = run("create_user", "erin")[-1]

        response = client.get("/users/me/quota", HTTP_AUTHORIZATION=f"Token {token}")

        assert response.status_code == 200

    @pytest.mark.parametrize("username", ["has space", "nul\x00", "x" * 151, ""])
    def test_an_invalid_username_is_refused(self, username):
        with pytest.raises(CommandError):
            run("create_user", username)
        assert not User.objects.exists()


@pytest.mark.django_db
def test_demo_setup_keeps_its_user_and_project_and_prints_a_new_token_last(client):
    first = run("demo_setup")
    second = run("demo_setup")

    demo = User.objects.get(username="demo")
    assert first[-1] != second[-1]
    assert demo.is_staff and demo.is_superuser and demo.check_password(demo_password())
    assert not demo.check_password("demo")
    project = Project.objects.get(name="demo")
    assert Membership.objects.get(project=project, user=demo).role == "owner"
    for key in (first[-1], second[-1]):
        response = client.get(f"/projects/{project.pk}", HTTP_AUTHORIZATION=f"Token {key}")
        assert response.status_code == 200


@pytest.mark.django_db
def test_demo_setup_revokes_all_but_the_newest_demo_tokens(client):
    keys = [run("demo_setup")[-1] for _ in range(DEMO_TOKENS_KEPT + 2)]

    codes = [
        client.get("/users/me/quota", HTTP_AUTHORIZATION=f"Token {key}").status_code for key in keys
    ]
    assert codes == [401, 401] + [200] * DEMO_TOKENS_KEPT
    assert ApiToken.objects.filter(name="demo", revoked_at__isnull=True).count() == DEMO_TOKENS_KEPT


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def sleeper(ready: Path) -> list[str]:
    """A child that exits 7 on SIGTERM and 8 on SIGINT; `ready` appears once it handles them.

    A signal that arrives before the handlers are installed kills the child instead
    (return code -15), so tests signal it only once it is ready.
    """
    return python(
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(8))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)"
    )


def wait_for(*paths: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        assert time.monotonic() < deadline, f"not ready after {timeout:g}s: {paths}"
        time.sleep(0.01)


def test_the_supervisor_stops_the_rest_when_one_child_exits(tmp_path):
    ready = tmp_path / "sleeper-ready"
    quitter = python(
        "import os, sys, time\n"
        f"while not os.path.exists({str(ready)!r}):\n"
        "    time.sleep(0.01)\n"
        "sys.exit(3)"
    )
    supervisor = Supervisor({"sleeper": sleeper(ready), "quitter": quitter}, poll_seconds=0.05)

    started = time.monotonic()
    code = supervisor.run()

    assert code == 3
    assert time.monotonic() - started < 20
    assert supervisor.children["sleeper"].returncode == 7  # it was sent SIGTERM


def test_the_supervisor_passes_a_signal_on_to_every_child(tmp_path):
    ready = [tmp_path / "a-ready", tmp_path / "b-ready"]
    supervisor = Supervisor({"a": sleeper(ready[0]), "b": sleeper(ready[1])}, poll_seconds=0.05)

    def interrupt_when_ready():
        wait_for(*ready)
        supervisor._on_signal(signal.SIGINT, None)

    thread = threading.Thread(target=interrupt_when_ready)
    thread.start()
    code = supervisor.run()
    thread.join()

    assert code == 0
    assert [child.returncode for child in supervisor.children.values()] == [8, 8]


def test_run_main_stops_on_ctrl_c(tmp_path):
    """The real command: both children start and a SIGINT stops everything."""
    fake_manage = tmp_path / "manage.py"
    fake_manage.write_text(
        "import sys, time\nprint('child', sys.argv[1:], flush=True)\ntime.sleep(60)\n"
    )
    script = (
        "import sys\n"
        "from controlplane.supervisor import Supervisor\n"
        f"s = Supervisor({{'api': [sys.executable, {str(fake_manage)!r}, 'runserver'],"
        f" 'worker': [sys.executable, {str(fake_manage)!r}, 'run_worker']}}, poll_seconds=0.05)\n"
        "sys.exit(s.run())\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    started = [process.stdout.readline(), process.stdout.readline()]
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)

    assert process.returncode == 0
    assert any("runserver" in line for line in started)
    assert any("run_worker" in line for line in started)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("addrport", "base"),
    [
        ("127.0.0.1:9000", "http://127.0.0.1:9000/"),
        ("9001", "http://127.0.0.1:9001/"),
        ("[::1]:9002", "http://[::1]:9002/"),
    ],
)
def test_the_auto_memory_demo_prints_the_address_it_is_given(addrport, base):
    lines = run("demo_auto_memory", "--addrport", addrport)

    urls = [line for line in lines if "http://" in line]
    assert len(urls) >= 4
    assert all(base in line for line in urls), urls
    assert not any(":8000" in line for line in lines)
