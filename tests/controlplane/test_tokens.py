"""Hashed API tokens: the /users/me/tokens API, authentication, `manage.py token`, and the
migration of DRF's plain-text keys."""

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from freezegun import freeze_time
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from controlplane.models import ApiToken, AuditEvent
from controlplane.services.tokens import TOKEN_ACTIVE_MAX, token_authenticate, token_key_hash
from tests.conftest import api_token_for

from .helpers import post_json


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def create(client, body):
    return post_json(client, "/users/me/tokens", body)


def run(*args) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


# --- Creating and listing -------------------------------------------------------------------


def test_a_new_token_is_shown_once_and_works(api_client_for, alice):
    response = create(api_client_for(alice), {"name": "laptop", "expires_in_days": 30})

    assert response.status_code == 201
    body = response.json()
    key = body["token"]
    assert key.startswith("cpt_") and len(key) == 47
    assert body["name"] == "laptop" and body["active"] is True
    assert body["prefix"] == key[4:12]
    assert body["revoked_at"] is None and body["last_used_at"] is None
    expires = timezone.datetime.fromisoformat(body["expires_at"])
    assert timedelta(days=29, hours=23) < expires - timezone.now() <= timedelta(days=30)
    assert with_key(key).get("/users/me/quota").status_code == 200
    assert AuditEvent.objects.filter(action="api_token_created", actor=alice).count() == 1


def test_only_the_hash_is_stored(api_client_for, alice):
    key = create(api_client_for(alice), {"name": "ci"}).json()["token"]

    row = ApiToken.objects.values().get(name="ci")
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert not any(key in str(value) for value in row.values())
    assert not any(key in str(event.data) for event in AuditEvent.objects.all())


def test_the_list_never_shows_a_key(api_client_for, alice, bob):
    client = api_client_for(alice)
    keys = [create(client, {"name": name}).json()["token"] for name in ("one", "two")]
    api_token_for(bob, name="bob's")

    response = client.get("/users/me/tokens")

    assert response.status_code == 200
    results = response.json()["results"]
    assert [token["name"] for token in results] == ["two", "one", "tests"]
    assert set(results[0]) == {
        "id",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "active",
    }
    assert not any(key in response.content.decode() for key in keys)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": 5}, "name"),
        ({"name": "nul\x00"}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ok", "expires_in_days": 0}, "expires_in_days"),
        ({"name": "ok", "expires_in_days": -1}, "expires_in_days"),
        ({"name": "ok", "expires_in_days": 3651}, "expires_in_days"),
        ({"name": "ok", "expires_in_days": "5"}, "expires_in_days"),
        ({"name": "ok", "expires_in_days": 1.5}, "expires_in_days"),
        ({"name": "ok", "expires_in_days": True}, "expires_in_days"),
        ({"name": "ok", "scopes": ["all"]}, "scopes"),
    ],
)
def test_bad_input_is_400_and_stores_nothing(api_client_for, alice, body, field):
    client = api_client_for(alice)

    response = create(client, body)

    assert response.status_code == 400
    assert field in response.json()
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["tests"]


def test_a_user_holds_at_most_so_many_active_tokens(api_client_for, alice):
    client = api_client_for(alice)
    for number in range(TOKEN_ACTIVE_MAX - 1):
        api_token_for(alice, name=f"t{number}")
    api_token_for(alice, name="revoked", revoked_at=timezone.now())

    response = create(client, {"name": "one too many"})

    assert response.status_code == 400
    assert "at most" in response.json()["name"][0]


def test_the_token_endpoints_need_authentication(client):
    assert client.get("/users/me/tokens").status_code == 401
    assert create(client, {"name": "x"}).status_code == 401
    assert client.delete("/users/me/tokens/1").status_code == 401


# --- Revoking -------------------------------------------------------------------------------


def test_a_revoked_token_is_refused_and_listed_as_revoked(api_client_for, alice):
    client = api_client_for(alice)
    created = create(client, {"name": "old"}).json()

    response = client.delete(f"/users/me/tokens/{created['id']}")

    assert response.status_code == 204
    refused = with_key(created["token"]).get("/users/me/quota")
    assert refused.status_code == 401
    assert refused.json() == {"detail": "Token revoked."}
    listed = {token["name"]: token for token in client.get("/users/me/tokens").json()["results"]}
    assert listed["old"]["revoked_at"] is not None and listed["old"]["active"] is False
    assert client.delete(f"/users/me/tokens/{created['id']}").status_code == 204
    assert AuditEvent.objects.filter(action="api_token_revoked").count() == 1


def test_a_token_can_revoke_itself(alice):
    key = api_token_for(alice, name="self")
    client = with_key(key)
    token = ApiToken.objects.get(name="self")

    assert client.delete(f"/users/me/tokens/{token.pk}").status_code == 204
    assert client.get("/users/me/tokens").status_code == 401


def test_another_users_token_is_404_and_stays_valid(api_client_for, alice, bob):
    bobs_key = api_token_for(bob, name="bob's")
    bobs = ApiToken.objects.get(name="bob's")

    response = api_client_for(alice).delete(f"/users/me/tokens/{bobs.pk}")

    assert response.status_code == 404
    assert with_key(bobs_key).get("/users/me/quota").status_code == 200
    assert ApiToken.objects.get(pk=bobs.pk).revoked_at is None


@pytest.mark.parametrize("token_id", ["abc", "-1", "0", "1e3", "99999999999999999999", "%00"])
def test_a_bad_token_id_is_404(api_client_for, alice, token_id):
    assert api_client_for(alice).delete(f"/users/me/tokens/{token_id}").status_code == 404


# --- Expiry and last use --------------------------------------------------------------------


def test_a_token_stops_working_when_it_expires(api_client_for, alice):
    with freeze_time("2026-03-01 12:00:00"):
        key = create(api_client_for(alice), {"name": "day", "expires_in_days": 1}).json()["token"]
    with freeze_time("2026-03-02 11:59:59"):
        assert with_key(key).get("/users/me/quota").status_code == 200
    with freeze_time("2026-03-02 12:00:00"):
        response = with_key(key).get("/users/me/quota")
        assert response.status_code == 401
        assert response.json() == {"detail": "Token expired."}
        listed = with_key(api_token_for(alice)).get("/users/me/tokens").json()["results"]
        assert [token["active"] for token in listed if token["name"] == "day"] == [False]


def test_last_use_is_written_at_most_once_a_minute(alice):
    key = api_token_for(alice, name="used")
    client = with_key(key)

    with freeze_time("2026-03-01 12:00:00"):
        client.get("/users/me/quota")
    first = ApiToken.objects.get(name="used").last_used_at
    with freeze_time("2026-03-01 12:00:59"):
        client.get("/users/me/quota")
    unchanged = ApiToken.objects.get(name="used").last_used_at
    with freeze_time("2026-03-01 12:01:00"):
        client.get("/users/me/quota")
    later = ApiToken.objects.get(name="used").last_used_at

    assert first.isoformat() == "2026-03-01T12:00:00+00:00"
    assert unchanged == first
    assert later.isoformat() == "2026-03-01T12:01:00+00:00"


def test_a_recently_used_token_authenticates_in_one_query(alice, django_assert_num_queries):
    key = api_token_for(alice)
    token_authenticate(key=key)  # stamps last use

    with django_assert_num_queries(1):
        token = token_authenticate(key=key)

    assert token.user == alice


def test_an_inactive_users_token_is_refused(alice):
    key = api_token_for(alice)
    alice.is_active = False
    alice.save()

    assert with_key(key).get("/users/me/quota").status_code == 401


# --- Malformed headers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Token",
        "Token ",
        "Token a b",
        "Token nope\x00",
        "Token \x00" * 3,
        "Token " + "a" * 200_000,
        "Token " + "0" * 40,
        "Token cpt_" + "A" * 43,
        "Token cpt_" + "A" * 42 + "é",
        "Token ünïcödé",
        "Token \u2028cpt_",
        "Token \udcff",
        "token " + "f" * 39,
    ],
)
def test_a_malformed_or_unknown_token_is_401_never_500(alice, client, header):
    response = client.get("/users/me/quota", HTTP_AUTHORIZATION=header)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_the_scheme_is_case_insensitive_and_other_schemes_are_anonymous(alice, client):
    key = api_token_for(alice)

    assert client.get("/users/me/quota", HTTP_AUTHORIZATION=f"token {key}").status_code == 200
    assert client.get("/users/me/quota", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401
    assert client.get("/users/me/quota", HTTP_AUTHORIZATION=f"Token {key}\x00").status_code == 401


# --- manage.py token ------------------------------------------------------------------------


@pytest.mark.django_db
class TestTokenCommand:
    def test_create_prints_the_key_last_and_it_works(self, alice):
        lines = run("token", "alice", "--create", "deploy bot", "--expires-days", "7")

        token = ApiToken.objects.get(name="deploy bot")
        assert token.key_hash == token_key_hash(lines[-1])
        assert token.expires_at - token.created_at == timedelta(days=7)
        assert with_key(lines[-1]).get("/users/me/quota").status_code == 200

    def test_list_shows_tokens_without_keys(self, alice):
        key = run("token", "alice", "--create", "laptop")[-1]
        revoked = ApiToken.objects.create(
            user=alice,
            name="gone",
            prefix="abcdefgh",
            key_hash="0" * 64,
            revoked_at=timezone.now(),
        )

        text = "\n".join(run("token", "alice", "--list"))

        assert "laptop" in text and "active" in text
        assert f"{revoked.pk}\tgone\tabcdefgh" in text and "revoked" in text
        assert key not in text and key[4:] not in text

    def test_revoke(self, alice):
        key = run("token", "alice", "--create", "laptop")[-1]
        token = ApiToken.objects.get(name="laptop")

        assert "Revoked" in run("token", "alice", "--revoke", str(token.pk))[-1]
        assert "already" in run("token", "alice", "--revoke", str(token.pk))[-1]
        assert with_key(key).get("/users/me/quota").status_code == 401

    def test_it_cannot_revoke_another_users_token(self, alice, bob):
        api_token_for(bob, name="bob's")
        bobs = ApiToken.objects.get(name="bob's")

        with pytest.raises(CommandError, match="no token"):
            run("token", "alice", "--revoke", str(bobs.pk))
        assert ApiToken.objects.get(pk=bobs.pk).revoked_at is None

    @pytest.mark.parametrize(
        "args",
        [
            ["nobody", "--list"],
            ["nul\x00", "--list"],
            ["alice", "--create", ""],
            ["alice", "--create", "x", "--expires-days", "0"],
            ["alice", "--list", "--expires-days", "3"],
            ["alice", "--revoke", "abc"],
        ],
    )
    def test_bad_arguments_are_refused(self, alice, args):
        with pytest.raises(CommandError):
            run("token", *args)
        assert not ApiToken.objects.exists()


# --- Migrating DRF's tokens -----------------------------------------------------------------

BEFORE = [("controlplane", "0008_api_tokens")]
AFTER = [("controlplane", "0009_api_tokens_from_authtoken")]


@pytest.fixture
def migrated_back_afterwards():
    """Leave the database at the latest migrations of every app, as the other tests expect
    (going back to BEFORE also unapplies the later migrations of apps that depend on it)."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_existing_authtoken_keys_keep_working_after_the_migration(
    user_factory, migrated_back_afterwards
):
    alice, bob = user_factory("alice"), user_factory("bob")
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    # Keys as DRF's authtoken made them (40 hex characters from its own generator).
    keys = {user.username: Token.objects.create(user=user).key for user in (alice, bob)}

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)

    assert not Token.objects.exists()  # the plain-text keys are gone
    migrated = {token.user.username: token for token in ApiToken.objects.select_related("user")}
    assert {name: token.name for name, token in migrated.items()} == {
        "alice": "migrated",
        "bob": "migrated",
    }
    assert migrated["alice"].prefix == keys["alice"][:8]
    for username, key in keys.items():
        response = with_key(key).get("/users/me/tokens")
        assert response.status_code == 200
        assert response.json()["results"][0]["id"] == migrated[username].pk


# --- Admin ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_lists_tokens_without_secrets_and_revokes_them(client, alice, staff):
    key = api_token_for(alice, name="laptop")
    token = ApiToken.objects.get(name="laptop")
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)

    page = client.get("/admin/controlplane/apitoken/")
    revoked = client.post(
        "/admin/controlplane/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
        follow=True,
    )

    assert page.status_code == 200
    text = page.content.decode()
    assert "laptop" in text and token.prefix in text
    assert key not in text and token.key_hash not in text
    assert revoked.status_code == 200 and "Revoked 1 token" in revoked.content.decode()
    assert with_key(key).get("/users/me/quota").status_code == 401
    assert client.get(f"/admin/controlplane/apitoken/{token.pk}/change/").status_code == 200
    assert client.get("/admin/controlplane/apitoken/add/").status_code == 403
