"""Failed password sign-ins: django-axes' locks, the per-username slow-down, and unlocking.

django-axes counts failed sign-ins (the admin's and the console's) per **(username, client
address)** in the `default` cache (CACHE_URL); at the limit that pair is locked for the
cool-off. A guesser locks only itself out: the owner signing in from another address is not
affected. Each lockout remembers its address under the username and its username under the
address (`sign_in_lockout_record`, connected to axes' `user_locked_out` signal), as the cache
cannot list keys, so staff can unlock a user (all their addresses) or an address (all its
users) with `manage.py unlock_sign_in` or the users admin, both through `sign_in_unlock`.
Every lockout and every unlock is audited.

A username guessed from many addresses is slowed down instead of locked: once it has
SIGN_IN_SLOWDOWN_AFTER failed sign-ins (from any addresses, counted until an hour passes
without one), each further failure makes its next sign-in wait 1 s, 2 s, 4 s ... up to
SIGN_IN_SLOWDOWN_MAX_SECONDS. Within the wait an attempt is answered "try again in T
seconds" without its password being checked (right and wrong alike); after it, one attempt
at a time has its password checked (`sign_in_slowdown_check` takes the turn, the caller
gives it back with `sign_in_turn_release`). Addresses the user has signed in from before
(for SIGN_IN_KNOWN_ADDRESS_DAYS) are not slowed. Everything lives in the same shared cache.
"""

import hashlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches

from controlplane.services.audit import audit_record

_ADDRESSES_KEY = "sign-in-lock-addresses:{username}"
_USERNAMES_KEY = "sign-in-lock-usernames:{address}"
_FAILURES_KEY = "sign-in-slow-failures:{user}"
_UNTIL_KEY = "sign-in-slow-until:{user}"
_TURN_KEY = "sign-in-slow-turn:{user}"
_KNOWN_KEY = "sign-in-known-addresses:{user}"
_FAILURE_WINDOW_SECONDS = 3600
_TURN_SECONDS = 30  # a turn whose holder never gave it back (a crash) frees itself
_KNOWN_ADDRESSES_KEPT = 20


def _cache():
    return caches[getattr(settings, "AXES_CACHE", "default")]


def _cooloff_seconds() -> int:
    cooloff = getattr(settings, "AXES_COOLOFF_TIME", None)
    return int(cooloff.total_seconds()) if cooloff else 24 * 3600


def _user_key(template: str, username: str) -> str:
    # Usernames come from the form as typed: hashed, any text makes a valid cache key.
    return template.format(user=hashlib.sha256(username.encode()).hexdigest()[:40])


def _remember(key: str, value: str) -> None:
    values = set(_cache().get(key, ()))
    values.add(value)
    _cache().set(key, sorted(v for v in values if v), timeout=_cooloff_seconds())


def sign_in_lockout_record(*, username: str | None, ip_address: str | None) -> None:
    """Remember that `ip_address` locked `username` out (for the unlock), and audit it once
    per lock (axes signals again at every refused attempt while locked)."""
    key = _ADDRESSES_KEY.format(username=username or "")
    if ip_address in set(_cache().get(key, ())):
        return
    _remember(key, ip_address or "")
    _remember(_USERNAMES_KEY.format(address=ip_address or ""), username or "")
    audit_record(
        action="sign_in_locked",
        actor_label=username or "",
        target_type="user",
        target_id=username or "",
        data={"ip_address": ip_address, "failure_limit": settings.AXES_FAILURE_LIMIT},
    )


def sign_in_unlock(*, actor, username: str | None = None, addresses: Iterable[str] = ()) -> int:
    """Lift the sign-in locks of `username` (from every address that locked it, and its
    slow-down) and of `addresses` (for every username they locked); returns how many counters
    were cleared (0: nothing was locked or slowed)."""
    from axes.utils import reset

    addresses = sorted(set(addresses))
    pairs: set[tuple[str, str]] = set()
    cleared = 0
    if username:
        key = _ADDRESSES_KEY.format(username=username)
        pairs |= {(username, address) for address in _cache().get(key, ())}
        _cache().delete(key)
        cleared += _slowdown_clear(username=username)
    for address in addresses:
        key = _USERNAMES_KEY.format(address=address)
        pairs |= {(name, address) for name in _cache().get(key, ())}
        _cache().delete(key)
    for name, address in sorted(pairs):
        cleared += reset(username=name, ip=address)
    all_addresses = sorted({address for _, address in pairs} | set(addresses))
    audit_record(
        action="sign_in_unlocked",
        actor=actor,
        actor_label="" if getattr(actor, "is_authenticated", False) else str(actor or ""),
        target_type="user" if username else "address",
        target_id=username or ",".join(addresses),
        data={"username": username, "ip_addresses": all_addresses, "cleared": cleared},
    )
    return cleared


@dataclass(frozen=True)
class SlowdownAnswer:
    wait: int  # seconds to wait before the password is checked; 0: check it now
    turn: bool  # this attempt holds the username's turn: give it back when done


def _slowdown_seconds(failures: int) -> int:
    excess = failures - settings.SIGN_IN_SLOWDOWN_AFTER
    return min(settings.SIGN_IN_SLOWDOWN_MAX_SECONDS, 2 ** min(excess, 30))


def sign_in_slowdown_check(*, username: str, ip_address: str | None) -> SlowdownAnswer:
    """Whether a sign-in attempt for `username` may have its password checked now.

    Reads only the username's counters, never the password, so the answer is the same for a
    right and a wrong one."""
    cache = _cache()
    failures = cache.get(_user_key(_FAILURES_KEY, username), 0)
    if failures < settings.SIGN_IN_SLOWDOWN_AFTER:
        return SlowdownAnswer(wait=0, turn=False)
    if ip_address and ip_address in cache.get(_user_key(_KNOWN_KEY, username), ()):
        return SlowdownAnswer(wait=0, turn=False)
    remaining = cache.get(_user_key(_UNTIL_KEY, username), 0) - time.time()
    if remaining > 0:
        return SlowdownAnswer(wait=math.ceil(remaining), turn=False)
    if not cache.add(_user_key(_TURN_KEY, username), 1, timeout=_TURN_SECONDS):
        return SlowdownAnswer(wait=1, turn=False)  # another attempt's password is being checked
    return SlowdownAnswer(wait=0, turn=True)


def sign_in_turn_release(*, username: str) -> None:
    _cache().delete(_user_key(_TURN_KEY, username))


def sign_in_failure_record(*, username: str) -> None:
    """Count a failed sign-in whose password was checked (from any address); past the
    threshold, set when the username's next attempt may be checked."""
    cache = _cache()
    key = _user_key(_FAILURES_KEY, username)
    if cache.add(key, 1, timeout=_FAILURE_WINDOW_SECONDS):
        failures = 1
    else:
        failures = cache.incr(key)
        cache.touch(key, timeout=_FAILURE_WINDOW_SECONDS)
    if failures >= settings.SIGN_IN_SLOWDOWN_AFTER:
        cache.set(
            _user_key(_UNTIL_KEY, username),
            time.time() + _slowdown_seconds(failures),
            timeout=_FAILURE_WINDOW_SECONDS,
        )


def sign_in_success_record(*, username: str, ip_address: str | None) -> None:
    """Remember the address a user signed in from: their next sign-ins from it are not slowed."""
    if not ip_address:
        return
    key = _user_key(_KNOWN_KEY, username)
    known = [a for a in _cache().get(key, ()) if a != ip_address]
    known = [*known, ip_address][-_KNOWN_ADDRESSES_KEPT:]
    _cache().set(key, known, timeout=settings.SIGN_IN_KNOWN_ADDRESS_DAYS * 24 * 3600)


def _slowdown_clear(*, username: str) -> int:
    keys = [_user_key(t, username) for t in (_FAILURES_KEY, _UNTIL_KEY, _TURN_KEY)]
    slowed = _cache().get(keys[0], 0) >= settings.SIGN_IN_SLOWDOWN_AFTER
    _cache().delete_many(keys)
    return int(slowed)
