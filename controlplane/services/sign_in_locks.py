"""Locked password sign-ins (django-axes) and lifting a lock.

django-axes counts failed sign-ins (the admin's and the console's) per client address and
per username in the `default` cache (CACHE_URL); either over the limit locks sign-in. A lock
expires after the cool-off; staff lift it earlier with `manage.py unlock_sign_in` or the
users admin, both through `sign_in_unlock`.

A username's lock comes with the address that made it (one guesser locks both), and the
cache keeps no list of addresses, so each lockout remembers its address under the username
(`sign_in_lockout_record`, connected to axes' `user_locked_out` signal): unlocking a user
lifts their addresses' locks too. Every lockout and every unlock is audited.
"""

from collections.abc import Iterable

from django.conf import settings
from django.core.cache import caches

from controlplane.services.audit import audit_record

_ADDRESSES_KEY = "sign-in-lock-addresses:{username}"


def _cache():
    return caches[getattr(settings, "AXES_CACHE", "default")]


def _cooloff_seconds() -> int:
    cooloff = getattr(settings, "AXES_COOLOFF_TIME", None)
    return int(cooloff.total_seconds()) if cooloff else 24 * 3600


def sign_in_lockout_record(*, username: str | None, ip_address: str | None) -> None:
    """Remember that `ip_address` locked `username` out (for the unlock), and audit it once
    per lock (axes signals again at every refused attempt while locked)."""
    key = _ADDRESSES_KEY.format(username=username or "")
    addresses = set(_cache().get(key, ()))
    if ip_address in addresses:
        return
    addresses.add(ip_address)
    _cache().set(key, sorted(a for a in addresses if a), timeout=_cooloff_seconds())
    audit_record(
        action="sign_in_locked",
        actor_label=username or "",
        target_type="user",
        target_id=username or "",
        data={"ip_address": ip_address, "failure_limit": settings.AXES_FAILURE_LIMIT},
    )


def sign_in_unlock(*, actor, username: str | None = None, addresses: Iterable[str] = ()) -> int:
    """Lift the sign-in locks of `username` (and of the addresses that locked it) and of
    `addresses`; returns how many counters were cleared (0: nothing was locked)."""
    from axes.utils import reset

    addresses = set(addresses)
    cleared = 0
    if username:
        key = _ADDRESSES_KEY.format(username=username)
        addresses |= set(_cache().get(key, ()))
        _cache().delete(key)
        cleared += reset(username=username)
    for address in sorted(addresses):
        cleared += reset(ip=address)
    audit_record(
        action="sign_in_unlocked",
        actor=actor,
        actor_label="" if getattr(actor, "is_authenticated", False) else str(actor or ""),
        target_type="user" if username else "address",
        target_id=username or ",".join(sorted(addresses)),
        data={"username": username, "ip_addresses": sorted(addresses), "cleared": cleared},
    )
    return cleared
