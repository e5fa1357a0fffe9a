"""Management commands and the process supervisor behind `make run`."""

import signal
import subprocess
import sys
import threading
import time
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token

from controlplane.models import Membership, Project
from controlplane.supervisor import Supervisor

User = get_user_model()


def run(*args) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db
class TestCreateUser:
    def test_it_creates_a_user_and_prints_the_token_last(self):
        lines = run("create_user", "dana")

        user = User.objects.get(username="dana")
        assert lines[-1] == Token.objects.get(user=user).key
        assert not user.is_staff
        assert not user.has_usable_password()

    def test_it_finds_an_existing_user_and_prints_the_same_token(self, alice):
        first = run("create_user", "alice")[-1]
        second = run("create_user", "alice")[-1]

        assert first == second == Token.objects.get(user=alice).key
        assert User.objects.filter(username="alice").count() == 1

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
def test_demo_setup_is_idempotent_and_prints_the_token_last(client):
    first = run("demo_setup")
    second = run("demo_setup")

    demo = User.objects.get(username="demo")
    assert first[-1] == second[-1] == Token.objects.get(user=demo).key
    assert demo.is_staff and demo.is_superuser and demo.check_password("demo")
    project = Project.objects.get(name="demo")
    assert Membership.objects.get(project=project, user=demo).role == "owner"
    response = client.get(f"/projects/{project.pk}", HTTP_AUTHORIZATION=f"Token {first[-1]}")
    assert response.status_code == 200


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


SLEEPER = python(
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
    "signal.signal(signal.SIGINT, lambda *a: sys.exit(8))\n"
    "time.sleep(60)"
)


def test_the_supervisor_stops_the_rest_when_one_child_exits():
    supervisor = Supervisor(
        {"sleeper": SLEEPER, "quitter": python("import sys; sys.exit(3)")}, poll_seconds=0.05
    )

    started = time.monotonic()
    code = supervisor.run()

    assert code == 3
    assert time.monotonic() - started < 20
    assert supervisor.children["sleeper"].returncode == 7  # it was sent SIGTERM


def test_the_supervisor_passes_a_signal_on_to_every_child():
    supervisor = Supervisor({"a": SLEEPER, "b": SLEEPER}, poll_seconds=0.05)
    timer = threading.Timer(1.0, lambda: supervisor._on_signal(signal.SIGINT, None))
    timer.start()

    code = supervisor.run()

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
    time.sleep(1.5)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)

    assert process.returncode == 0
    assert "runserver" in out and "run_worker" in out
