"""API tokens: minted with a high-entropy key, stored as its SHA-256, shown once.

A key is `cpt_` and 43 URL-safe characters (32 random bytes). Keys migrated from DRF's
authtoken are 40 hex characters and keep working. Any other shape is refused before the
database is asked. Lookups go by the hash (a unique index); the stored hash is compared
again in constant time.
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.limits import text_require
from controlplane.models import ApiToken
from controlplane.rawsql import column, instances_from_row, select_list, table
from controlplane.services.audit import audit_record

TOKEN_KEY_PREFIX = "cpt_"
TOKEN_KEY = re.compile(r"cpt_[A-Za-z0-9_-]{43}|[0-9a-f]{40}")
TOKEN_PREFIX_CHARS = 8
TOKEN_NAME_MAX_CHARS = 100
TOKEN_EXPIRES_MAX_DAYS = 3650
# A user's tokens that are neither revoked nor expired, at most.
TOKEN_ACTIVE_MAX = 100
# `last_used_at` is written at most this often per token.
TOKEN_LAST_USED_EVERY = timedelta(seconds=60)


class TokenInvalid(Exception):
    """The key is malformed, unknown, expired or revoked (the message says which)."""


@dataclass(frozen=True)
class MintedToken:
    token: ApiToken
    key: str  # the only time the key exists outside its holder


def token_key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_key_new() -> str:
    """A new random key: `cpt_` and 32 random bytes, URL-safe base64 (43 characters)."""
    return TOKEN_KEY_PREFIX + secrets.token_urlsafe(32)


def token_visible_prefix(key: str) -> str:
    """The first characters of the key after `cpt_` (of a migrated key, its first eight)."""
    return key.removeprefix(TOKEN_KEY_PREFIX)[:TOKEN_PREFIX_CHARS]


@transaction.atomic
def token_create(*, user, name: str, expires_in_days: int | None = None, actor=None) -> MintedToken:
    """Mint a token for `user`. Its key is returned, never stored: it cannot be shown again."""
    name = text_require(name, field="name", max_chars=TOKEN_NAME_MAX_CHARS).strip()
    if expires_in_days is not None and not 1 <= expires_in_days <= TOKEN_EXPIRES_MAX_DAYS:
        raise DomainError(
            f"Ensure this value is between 1 and {TOKEN_EXPIRES_MAX_DAYS}.",
            field="expires_in_days",
        )
    # The user's row lock serialises concurrent creations, so the cap holds.
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    now = timezone.now()
    active = token_active_filter(now=now)
    if ApiToken.objects.filter(active, user=user).count() >= TOKEN_ACTIVE_MAX:
        raise DomainError(
            f"A user holds at most {TOKEN_ACTIVE_MAX} active tokens: revoke one first.",
            field="name",
        )
    key = token_key_new()
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=token_visible_prefix(key),
        key_hash=token_key_hash(key),
        created_at=now,
        expires_at=now + timedelta(days=expires_in_days) if expires_in_days else None,
    )
    audit_record(
        action="api_token_created",
        actor=actor or user,
        target_type="api_token",
        target_id=token.pk,
        data={"user": user.get_username(), "name": name, "expires_at": _iso(token.expires_at)},
    )
    return MintedToken(token=token, key=key)


@transaction.atomic
def token_revoke(*, token: ApiToken, actor=None) -> ApiToken:
    """Revoke the token from now on (the row stays, for the record); revoking again is a no-op."""
    revoked = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db(fields=["revoked_at"])
    if revoked:
        audit_record(
            action="api_token_revoked",
            actor=actor,
            target_type="api_token",
            target_id=token.pk,
            data={"user_id": token.user_id, "name": token.name},
        )
    return token


def token_authenticate(*, key: str) -> ApiToken:
    """The live token whose key this is (with its user loaded); `TokenInvalid` otherwise.

    Also stamps `last_used_at`, at most once per `TOKEN_LAST_USED_EVERY`.
    """
    if not TOKEN_KEY.fullmatch(key):
        raise TokenInvalid("Invalid token.")
    key_hash = token_key_hash(key)
    token = _token_with_user(key_hash)
    if token is None or not hmac.compare_digest(token.key_hash, key_hash):
        raise TokenInvalid("Invalid token.")
    now = timezone.now()
    if token.revoked_at is not None:
        raise TokenInvalid("Token revoked.")
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenInvalid("Token expired.")
    if not token.user.is_active:
        raise TokenInvalid("User inactive or deleted.")
    if token.last_used_at is None or now - token.last_used_at >= TOKEN_LAST_USED_EVERY:
        stale = Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - TOKEN_LAST_USED_EVERY)
        ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def _token_with_user(key_hash: str) -> ApiToken | None:
    """The token with this hash, its user loaded, in one statement written once per process.

    Every authenticated request makes this lookup; compiling the ORM's query for it cost about
    as much CPU as running it, so it is written once (`rawsql`) and only executed after.
    """
    with connection.cursor() as cursor:
        cursor.execute(_token_with_user_sql(connection.vendor), [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    (token, token.user), _ = instances_from_row((ApiToken, get_user_model()), row)
    return token


@lru_cache
def _token_with_user_sql(vendor: str) -> str:
    user_model = get_user_model()
    token_columns, _ = select_list(ApiToken, "t")
    user_columns, _ = select_list(user_model, "u")
    joined = f"u.{column(user_model, 'id')} = t.{column(ApiToken, 'user')}"
    return (
        f"SELECT {token_columns}, {user_columns} FROM {table(ApiToken)} t "
        f"JOIN {table(user_model)} u ON {joined} WHERE t.{column(ApiToken, 'key_hash')} = %s"
    )


def token_list(*, user) -> QuerySet[ApiToken]:
    """All the user's tokens, revoked and expired ones too, newest first (never their keys)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def token_get_for_user(*, user, token_id: str) -> ApiToken | None:
    """The user's token with this id (a path segment); None for another user's or no token."""
    text = str(token_id)
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return ApiToken.objects.filter(user=user, pk=int(text)).first()


def token_active_filter(*, now) -> Q:
    """Tokens that are neither revoked nor expired at `now`."""
    return Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None
