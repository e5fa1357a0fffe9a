"""Failed password sign-ins lock the admin's login (and the console's) per (username, address)
(django-axes, counters in the CACHE_URL cache); staff lift a lock with
`manage.py unlock_sign_in` or the users admin. The per-username slow-down:
test_sign_in_slowdown.py."""

import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client

from controlplane.models import AuditEvent

ADMIN_LOGIN = "/admin/login/?next=/admin/"
OTHER_ADDRESS = "198.51.100.23"
ALICE = {"username": "alice", "password": "pw-alice"}


def _admin_sign_in(client: Client, username: str, password: str, **extra):
    return client.post(ADMIN_LOGIN, {"username": username, "password": password}, **extra)


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_forty_wrong_passwords_lock_that_address_out_of_that_account_only(client, root, settings):
    codes = [_admin_sign_in(client, "root", f"guess-{i}").status_code for i in range(40)]
    limit = settings.AXES_FAILURE_LIMIT
    assert codes[: limit - 1] == [200] * (limit - 1)  # the form again, with its error
    assert set(codes[limit - 1 :]) == {429}

    # The right password does not get in from the guessing address...
    refused = _admin_sign_in(client, "root", "pw-root")
    assert refused.status_code == 429 and not _signed_in(client)
    # ...but the owner, from anywhere else, signs in: a guesser cannot lock them out.
    elsewhere = Client(REMOTE_ADDR=OTHER_ADDRESS)
    assert _admin_sign_in(elsewhere, "root", "pw-root").status_code == 302
    assert _signed_in(elsewhere)
    locked = AuditEvent.objects.filter(action="sign_in_locked")
    # Audited once (not at every refused attempt).
    assert [(e.target_id, e.data["ip_address"]) for e in locked] == [("root", "127.0.0.1")]

    call_command("unlock_sign_in", "root")

    signed_in = _admin_sign_in(client, "root", "pw-root")
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert _signed_in(client)
    unlocked = AuditEvent.objects.get(action="sign_in_unlocked")
    assert unlocked.actor_label == "manage.py unlock_sign_in"
    assert unlocked.data["ip_addresses"] == ["127.0.0.1"]


def test_an_address_locked_out_of_several_accounts_is_unlocked_at_once(
    client, root, alice, settings
):
    for username in ("root", "alice"):
        for _ in range(settings.AXES_FAILURE_LIMIT):
            _admin_sign_in(client, username, "guess")
    assert _admin_sign_in(client, "root", "pw-root").status_code == 429
    assert Client().post("/console/sign-in", ALICE).status_code == 429
    # From another address the owner signs in.
    elsewhere = Client(REMOTE_ADDR=OTHER_ADDRESS)
    assert _admin_sign_in(elsewhere, "root", "pw-root").status_code == 302

    call_command("unlock_sign_in", "--address", "127.0.0.1")
    event = AuditEvent.objects.get(action="sign_in_unlocked")
    assert event.target_id == "127.0.0.1" and event.data["cleared"] == 2
    assert Client().post("/console/sign-in", ALICE).status_code == 302
    assert _admin_sign_in(client, "root", "pw-root").status_code == 302


def test_the_lock_expires_after_the_cool_off(client, root, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _admin_sign_in(client, "root", "guess")
    assert _admin_sign_in(client, "root", "pw-root").status_code == 429
    time.sleep(2.1)  # the failure while locked restarted the wait
    assert _admin_sign_in(client, "root", "pw-root").status_code == 302


def test_staff_unlock_a_user_in_the_admin(client, root, alice, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        Client().post("/console/sign-in", {"username": "alice", "password": "guess"})
    console = Client()
    refused = console.post("/console/sign-in", {"username": "alice", "password": "pw-alice"})
    assert refused.status_code == 429 and not _signed_in(console)

    staff = Client()
    staff.force_login(root)
    response = staff.post(
        "/admin/auth/user/",
        {"action": "unlock_sign_in", "_selected_action": [alice.pk]},
        follow=True,
    )
    assert "Unlocked sign-in for alice." in response.content.decode()
    event = AuditEvent.objects.get(action="sign_in_unlocked")
    assert event.actor == root and event.target_id == "alice"

    again = console.post("/console/sign-in", {"username": "alice", "password": "pw-alice"})
    assert again.status_code == 302 and _signed_in(console)


def test_unlocking_nobody_says_so(root):
    from io import StringIO

    out = StringIO()
    call_command("unlock_sign_in", "root", stdout=out)
    assert out.getvalue().strip() == "root: was not locked"
    with pytest.raises(Exception, match="at least one"):
        call_command("unlock_sign_in")


def test_the_lock_is_shared_through_the_cache_url(client, root, settings, tmp_path, local_redis):
    """Another process with the same CACHE_URL sees the lock (a real Redis, as CI has)."""
    database = str(tmp_path / "unused.sqlite3")
    prefix = f"axes-test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": local_redis,
            "KEY_PREFIX": prefix,
        }
    }
    from axes.handlers.proxy import AxesProxyHandler

    AxesProxyHandler.implementation = None  # it holds the cache it was made with
    try:
        for _ in range(settings.AXES_FAILURE_LIMIT):
            _admin_sign_in(client, "root", "guess")
        probe = (
            "import os, django; django.setup();"
            "from django.conf import settings;"
            "settings.CACHES['default']['KEY_PREFIX'] = os.environ['PROBE_KEY_PREFIX'];"
            "from django.test import RequestFactory;"
            "from axes.handlers.proxy import AxesProxyHandler;"
            "request = RequestFactory().post('/admin/login/', REMOTE_ADDR='127.0.0.1');"
            "AxesProxyHandler.update_request(request);"
            "print(AxesProxyHandler.is_locked(request, {'username': 'root'}))"
        )
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "CACHE_URL": local_redis,
            "PROBE_KEY_PREFIX": prefix,
            "DATABASE_URL": f"sqlite:///{database}",
        }
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True"
    finally:
        caches["default"].clear()
        AxesProxyHandler.implementation = None
