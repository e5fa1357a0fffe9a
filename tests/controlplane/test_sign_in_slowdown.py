"""A username guessed from many addresses is slowed down, never locked: past
SIGN_IN_SLOWDOWN_AFTER failures each attempt waits (1 s, 2 s, 4 s ... up to a cap) before its
password is checked; the owner signs in after the wait, or at once from an address they signed
in from before. Both the admin's login and the console's sign-in."""

import os
import subprocess
import sys
import uuid

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client
from freezegun import freeze_time

from controlplane.services.sign_in_locks import sign_in_failure_record, sign_in_slowdown_check

ADMIN_LOGIN = "/admin/login/?next=/admin/"
CONSOLE_SIGN_IN = "/console/sign-in"


def _address(i: int) -> str:
    return f"203.0.113.{i % 250 + 1}" if i < 250 else f"198.51.100.{i % 250 + 1}"


def _sign_in(url: str, username: str, password: str, address: str):
    client = Client(REMOTE_ADDR=address)
    response = client.post(url, {"username": username, "password": password})
    return response, "_auth_user_id" in client.session


def _botnet_guesses(url: str, username: str, count: int, first: int = 0) -> list[int]:
    """`count` wrong passwords for `username`, each from another address."""
    return [
        _sign_in(url, username, f"guess-{i}", _address(i))[0].status_code
        for i in range(first, first + count)
    ]


@pytest.mark.parametrize("url", [ADMIN_LOGIN, CONSOLE_SIGN_IN])
def test_a_username_guessed_from_many_addresses_waits_then_the_owner_signs_in(url, root, settings):
    after = settings.SIGN_IN_SLOWDOWN_AFTER
    with freeze_time("2030-01-01 12:00:00") as clock:
        # Each address stays far below the lock; none of these is slowed yet.
        assert set(_botnet_guesses(url, "root", after)) == {200}

        # The owner, from a fresh address, within the wait: refused without a password check.
        refused, signed_in = _sign_in(url, "root", "pw-root", "192.0.2.10")
        assert refused.status_code == 429 and not signed_in
        assert refused["Retry-After"] == "1"
        assert "Try again in 1 seconds" in refused.content.decode()

        clock.tick(1.5)
        response, signed_in = _sign_in(url, "root", "pw-root", "192.0.2.10")
        assert response.status_code == 302 and signed_in


def test_the_wait_never_tells_a_right_password_from_a_wrong_one(root, settings):
    with freeze_time("2030-01-01 12:00:00"):
        _botnet_guesses(ADMIN_LOGIN, "root", settings.SIGN_IN_SLOWDOWN_AFTER)
        right, right_in = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
        wrong, _ = _sign_in(ADMIN_LOGIN, "root", "wrong", "192.0.2.11")
        nobody, _ = _sign_in(ADMIN_LOGIN, "root", "", "192.0.2.12")
    assert not right_in
    answers = {
        (r.status_code, r["Retry-After"], r.content, r["Content-Type"])
        for r in (right, wrong, nobody)
        if r.status_code == 429
    }
    assert len(answers) == 1 and right.status_code == wrong.status_code == 429


def test_the_wait_doubles_with_each_failure_up_to_the_cap(root, settings):
    settings.SIGN_IN_SLOWDOWN_MAX_SECONDS = 60
    after = settings.SIGN_IN_SLOWDOWN_AFTER
    waits = []
    with freeze_time("2030-01-01 12:00:00") as clock:
        _botnet_guesses(ADMIN_LOGIN, "root", after)
        for i in range(9):
            refused, _ = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
            assert refused.status_code == 429
            wait = int(refused["Retry-After"])
            waits.append(wait)
            # Attempts within the wait are not checked, so they neither count nor extend it.
            assert set(_botnet_guesses(ADMIN_LOGIN, "root", 5, first=100 + 10 * i)) == {429}
            clock.tick(wait)
            # The wait is over: the next guess has its password checked (and fails).
            assert _botnet_guesses(ADMIN_LOGIN, "root", 1, first=200 + i) == [200]
        assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]

        clock.tick(60)
        response, signed_in = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
        assert response.status_code == 302 and signed_in


def test_one_address_guessing_locks_itself_and_leaves_the_owner_alone(root, settings):
    """Ten failures from one address: that address is locked, nobody is slowed."""
    with freeze_time("2030-01-01 12:00:00"):
        attacker = Client(REMOTE_ADDR="203.0.113.66")
        for i in range(settings.AXES_FAILURE_LIMIT + 30):
            attacker.post(ADMIN_LOGIN, {"username": "root", "password": f"guess-{i}"})
        response, signed_in = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
        assert response.status_code == 302 and signed_in
        console, signed_in = _sign_in(CONSOLE_SIGN_IN, "root", "pw-root", "192.0.2.11")
        assert console.status_code == 302 and signed_in


def test_an_address_the_owner_signed_in_from_is_not_slowed(root, alice, settings):
    with freeze_time("2030-01-01 12:00:00"):
        assert _sign_in(CONSOLE_SIGN_IN, "root", "pw-root", "192.0.2.10")[1]
        _botnet_guesses(ADMIN_LOGIN, "root", settings.SIGN_IN_SLOWDOWN_AFTER + 3)
        # From the owner's usual address: in at once (admin and console alike).
        response, signed_in = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
        assert response.status_code == 302 and signed_in
        # From a new one: slowed, as anyone.
        assert _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.99")[0].status_code == 429
        # Another user signing in from that address does not make it known for root.
        assert _sign_in(CONSOLE_SIGN_IN, "alice", "pw-alice", "192.0.2.99")[0].status_code == 302
        assert _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.99")[0].status_code == 429


def test_one_attempt_at_a_time_has_its_password_checked_after_the_wait(root, settings):
    with freeze_time("2030-01-01 12:00:00") as clock:
        _botnet_guesses(ADMIN_LOGIN, "root", settings.SIGN_IN_SLOWDOWN_AFTER)
        clock.tick(5)
        first = sign_in_slowdown_check(username="root", ip_address="192.0.2.1")
        second = sign_in_slowdown_check(username="root", ip_address="192.0.2.2")
    assert first.wait == 0 and first.turn
    assert second.wait == 1 and not second.turn


def test_unlock_sign_in_lifts_the_slow_down(root, settings):
    with freeze_time("2030-01-01 12:00:00"):
        _botnet_guesses(ADMIN_LOGIN, "root", settings.SIGN_IN_SLOWDOWN_AFTER + 8)
        assert _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")[0].status_code == 429
        call_command("unlock_sign_in", "root")
        response, signed_in = _sign_in(ADMIN_LOGIN, "root", "pw-root", "192.0.2.10")
        assert response.status_code == 302 and signed_in


def test_another_process_sees_the_slow_down_through_the_cache_url(
    root, settings, tmp_path, local_redis
):
    prefix = f"slowdown-test-{uuid.uuid4().hex}"
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
        _botnet_guesses(ADMIN_LOGIN, "root", settings.SIGN_IN_SLOWDOWN_AFTER)
        for _ in range(4):  # four more checked failures, as fast as the clock allows
            sign_in_failure_record(username="root")
        probe = (
            "import os, django; django.setup();"
            "from django.conf import settings;"
            "settings.CACHES['default']['KEY_PREFIX'] = os.environ['PROBE_KEY_PREFIX'];"
            "from controlplane.services.sign_in_locks import sign_in_slowdown_check;"
            "print(sign_in_slowdown_check(username='root', ip_address='192.0.2.99').wait)"
        )
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "CACHE_URL": local_redis,
            "PROBE_KEY_PREFIX": prefix,
            "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
        }
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert 8 <= int(done.stdout.strip()) <= 16  # 2**4 s from the last failure
    finally:
        caches["default"].clear()
        AxesProxyHandler.implementation = None
