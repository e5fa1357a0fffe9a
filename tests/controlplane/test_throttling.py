"""Throttling: failed authentication and anonymous traffic per address, users per user, the
auto memory run endpoint stricter (and stricter still with force), 429 with Retry-After."""

import os
import subprocess
import sys
import uuid
from collections import Counter

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import caches
from freezegun import freeze_time
from rest_framework.test import APIClient

from tests.conftest import api_token_for

from .helpers import post_json

BAD_TOKEN = "Token " + "0" * 40


@pytest.fixture
def rates(settings):
    """`rates(user="5/min", ...)` sets those throttle rates, keeping the others."""

    def set_rates(**changed):
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {
                **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
                **changed,
            },
        }

    return set_rates


def configured(scope: str) -> int:
    return int(django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope].split("/")[0])


def statuses(responses) -> list[tuple[int, int]]:
    """Runs of equal status codes, in order: [(401, 30), (429, 270)]."""
    runs: list[tuple[int, int]] = []
    for response in responses:
        if runs and runs[-1][0] == response.status_code:
            runs[-1] = (response.status_code, runs[-1][1] + 1)
        else:
            runs.append((response.status_code, 1))
    return runs


# --- Failed authentication, per address -----------------------------------------------------


@pytest.mark.django_db
def test_300_bad_token_requests_get_429_after_the_configured_rate(client):
    allowed = configured("failed_auth")

    responses = [
        client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN, HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
        for n in range(300)
    ]

    runs = statuses(responses)
    print(f"\n300 bad-token requests at failed_auth={allowed}/min: {runs}")
    assert runs == [(401, allowed), (429, 300 - allowed)]
    retry_after = {int(response["Retry-After"]) for response in responses[allowed:]}
    assert retry_after and all(0 < seconds <= 60 for seconds in retry_after)


@pytest.mark.django_db
def test_a_blocked_address_gets_429_even_with_a_right_key_and_others_do_not(alice, client, rates):
    rates(failed_auth="3/min")
    key = api_token_for(alice)
    for _ in range(3):
        assert client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN).status_code == 401

    blocked = client.get("/projects", HTTP_AUTHORIZATION=f"Token {key}")
    elsewhere = client.get("/projects", HTTP_AUTHORIZATION=f"Token {key}", REMOTE_ADDR="10.9.9.9")

    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    assert elsewhere.status_code == 200


@pytest.mark.django_db
def test_the_failed_auth_block_lifts_when_the_window_passes(alice, client, rates):
    rates(failed_auth="2/min")
    key = api_token_for(alice)
    with freeze_time("2026-03-01 12:00:00") as clock:
        for _ in range(2):
            client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN)
        clock.tick(30)
        response = client.get("/projects", HTTP_AUTHORIZATION=f"Token {key}")
        assert response.status_code == 429
        assert response["Retry-After"] == "30"
        clock.tick(30)
        assert client.get("/projects", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


@pytest.mark.django_db
def test_good_tokens_do_not_count_as_failures(alice, client, rates):
    rates(failed_auth="2/min", user="100/min")
    key = api_token_for(alice)

    codes = [
        client.get("/projects", HTTP_AUTHORIZATION=f"Token {key}").status_code for _ in range(10)
    ]

    assert codes == [200] * 10


@pytest.mark.django_db
def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(client, rates, settings):
    rates(failed_auth="2/min")
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}

    def attempt(address):
        return client.get(
            "/projects", HTTP_AUTHORIZATION=BAD_TOKEN, HTTP_X_FORWARDED_FOR=address
        ).status_code

    assert [attempt("203.0.113.5") for _ in range(3)] == [401, 401, 429]
    assert attempt("203.0.113.6") == 401


# --- Anonymous, per address -----------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_requests_get_429_after_the_anon_rate(client, rates):
    rates(anon="5/min")

    responses = [client.get("/projects") for _ in range(8)]

    assert statuses(responses) == [(401, 5), (429, 3)]
    assert int(responses[-1]["Retry-After"]) > 0
    assert client.get("/projects", REMOTE_ADDR="10.1.1.1").status_code == 401


@pytest.mark.django_db
def test_health_readiness_and_metrics_are_never_throttled(client, rates, settings):
    rates(anon="1/min", failed_auth="1/min")
    settings.METRICS_ENABLED = True
    client.get("/projects")
    client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN)
    assert client.get("/projects").status_code == 429

    for _ in range(20):
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics", HTTP_AUTHORIZATION=BAD_TOKEN).status_code == 200


# --- Per user -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_user_has_their_own_budget_whatever_their_address(api_client_for, alice, bob, rates):
    rates(user="5/min")
    alices = api_client_for(alice)

    responses = [alices.get("/users/me/quota", REMOTE_ADDR=f"10.0.0.{n}") for n in range(1, 8)]

    assert statuses(responses) == [(200, 5), (429, 2)]
    assert int(responses[-1]["Retry-After"]) > 0
    assert api_client_for(bob).get("/users/me/quota").status_code == 200


@pytest.mark.django_db
def test_a_session_user_is_throttled_per_user(alice, rates):
    rates(user="2/min")
    client = APIClient()
    client.force_login(alice)

    assert [client.get("/users/me/quota").status_code for _ in range(3)] == [200, 200, 429]


# --- The auto memory run endpoint -----------------------------------------------------------


def run(client, body):
    return post_json(client, "/users/me/auto-memory/run", body)


@pytest.mark.django_db
def test_the_default_rates_are_stricter_for_run_and_stricter_still_for_force():
    def per_hour(scope: str) -> float:
        number, period = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope].split("/")
        return int(number) * {"s": 3600, "m": 60, "h": 1, "d": 1 / 24}[period[0]]

    assert per_hour("run_force") < per_hour("run") < per_hour("user")


@pytest.mark.django_db
def test_run_is_throttled_per_user_and_force_more_strictly(api_client_for, alice, bob, rates):
    rates(run="3/hour", run_force="1/hour")
    client = api_client_for(alice)

    forced = [run(client, {"force": True}).status_code for _ in range(2)]
    plain = [run(client, {"force": False}).status_code for _ in range(3)]

    assert forced == [200, 429]
    # Both forced requests count against `run`: DRF counts a request in each throttle it
    # passes, even one another throttle refuses.
    assert plain == [200, 429, 429]
    assert run(api_client_for(bob), {"force": True}).status_code == 200
    assert client.get("/users/me/quota").status_code == 200  # other endpoints unaffected


@pytest.mark.django_db
def test_force_given_as_1_counts_as_force(api_client_for, alice, rates):
    rates(run_force="1/hour")
    client = api_client_for(alice)

    assert run(client, {"force": 1}).status_code == 200
    response = run(client, {"force": "true"})
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 3600


@pytest.mark.django_db
def test_a_malformed_run_body_is_still_a_400(api_client_for, alice):
    client = api_client_for(alice)

    response = client.post(
        "/users/me/auto-memory/run", data="{not json", content_type="application/json"
    )

    assert response.status_code == 400


# --- Settings and a shared cache ------------------------------------------------------------


def test_a_malformed_rate_setting_stops_start_up():
    env = {**os.environ, "API_THROTTLE_USER": "lots"}

    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**env, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "Throttle rate user: 'lots'" in done.stderr


@pytest.fixture
def redis_cache(settings, local_redis):
    prefix = f"throttle-test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": local_redis,
            "KEY_PREFIX": prefix,
        }
    }
    yield caches["default"]
    server = redis.Redis.from_url(local_redis)
    for key in server.scan_iter(f"{prefix}:*"):
        server.delete(key)
    server.close()


@pytest.mark.django_db
def test_the_throttle_counts_in_a_redis_cache(client, rates, redis_cache):
    rates(failed_auth="4/min")

    codes = Counter(
        client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN).status_code for _ in range(10)
    )

    assert codes == {401: 4, 429: 6}
    assert len(redis_cache.get("throttle_failed_auth_127.0.0.1")) == 4
    # Another process sharing the cache (here: a fresh connection) sees the same count.
    redis_cache.close()
    assert client.get("/projects", HTTP_AUTHORIZATION=BAD_TOKEN).status_code == 429
