"""The sweep lease: one sweeper at a time, globally and per user.

A lease lives on a `SweepState` row (`global`, or `user:<id>`): a holder's random token and
an expiry. Taking it is one conditional UPDATE (the row's lease is free, expired, or already
this holder's), so on PostgreSQL (row locks, the WHERE re-checked after a wait) and on
SQLite (one writer at a time) exactly one holder wins, and a worker that does not get it has
spent one statement. The holder renews it whenever less than half its life is left (before
each task's model calls) and lets go when it stops; a holder that dies leaves a lease that
expires, and the next sweeper takes it over. No transaction is held open and no session
lock is taken, so this works behind a transaction-mode pooler.

The global sweep also takes the `user:<id>` leases of the users whose tasks it is about to
process, and a user's own sweep (the run endpoint, `run_auto_memory --user`) takes that
user's lease: the two never work on one user's tasks at once, and neither pays twice for a
task's model calls.
"""

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from automemory import conf
from automemory.models import SweepState
from controlplane.errors import ConflictError

logger = logging.getLogger(__name__)

GLOBAL = "global"


def user_lease_name(user_id: int) -> str:
    return f"user:{user_id}"


def holder_label(role: str = "") -> str:
    """Who holds a lease, for operators: host, process id and what it does."""
    label = f"{socket.gethostname()}:{os.getpid()}"
    return f"{label} {role}"[:200] if role else label[:200]


class SweepBusy(ConflictError):
    """Another sweep is working on this user's tasks; try again in `retry_after` seconds."""

    retry_after = 30


@dataclass
class Lease:
    """The leases one sweeper holds (by name) under its token, and when they expire."""

    holder: str
    token: uuid.UUID = field(default_factory=uuid.uuid4)
    names: set[str] = field(default_factory=set)
    expires_at: datetime | None = None
    lost: bool = False
    # Set from another thread when the process stops: the sweep leaves its remaining tasks.
    stopping: bool = False

    @staticmethod
    def ttl() -> timedelta:
        return timedelta(seconds=conf.get("SWEEP_LEASE_SECONDS"))

    @property
    def held(self) -> bool:
        return bool(self.names) and not self.lost


def _take_sql(count: int) -> str:
    """One upsert taking `count` leases: a missing row is made already taken; an existing
    one is taken only when its lease is free, expired, or this holder's (then it keeps its
    generation). RETURNING names the rows taken (PostgreSQL; SQLite 3.35 and newer)."""
    quote = connection.ops.quote_name
    table = quote(SweepState._meta.db_table)
    values = ", ".join(["(%s, 0, %s, %s, %s, 1)"] * count)
    return (
        f"INSERT INTO {table} (name, cursor_task_id, lease_token, lease_holder,"
        f" lease_expires_at, lease_generation) VALUES {values}"
        " ON CONFLICT (name) DO UPDATE SET lease_token = excluded.lease_token,"
        " lease_holder = excluded.lease_holder, lease_expires_at = excluded.lease_expires_at,"
        f" lease_generation = CASE WHEN {table}.lease_token = excluded.lease_token"
        f" THEN {table}.lease_generation ELSE {table}.lease_generation + 1 END"
        f" WHERE {table}.lease_token IS NULL OR {table}.lease_expires_at < %s"
        f" OR {table}.lease_token = excluded.lease_token"
        " RETURNING name"
    )


def _take(lease: Lease, names: list[str]) -> set[str]:
    """Take the leases `names` for `lease`'s holder in one statement; return those taken."""
    now = timezone.now()
    expires_at = now + lease.ttl()
    token = SweepState._meta.get_field("lease_token").get_db_prep_value(
        lease.token, connection, prepared=False
    )
    params: list = []
    for name in names:
        params += [name, token, lease.holder, connection.ops.adapt_datetimefield_value(expires_at)]
    params.append(connection.ops.adapt_datetimefield_value(now))
    with connection.cursor() as cursor:
        cursor.execute(_take_sql(len(names)), params)
        taken = {row[0] for row in cursor.fetchall()}
    if taken:
        kept = lease.names - taken
        lease.names |= taken
        lease.expires_at = min(lease.expires_at, expires_at) if kept else expires_at
        lease.lost = False
    return taken


def lease_take(lease: Lease, name: str) -> bool:
    """Take (or keep) the lease `name` for `lease`'s holder, making its row when missing;
    one statement. False when another live holder has it."""
    return bool(_take(lease, [name]))


def leases_take(lease: Lease, names: Iterable[str]) -> set[str]:
    """Take the leases `names` not yet held in one statement; return those now held."""
    wanted = sorted(set(names) - lease.names)
    return _take(lease, wanted) if wanted else set()


def user_leases_take(lease: Lease, user_ids: Iterable[int]) -> set[int]:
    """Take the user leases of `user_ids` not yet held (`leases_take`); return the ids of the
    users whose lease this holder took."""
    names = {user_id: user_lease_name(user_id) for user_id in user_ids}
    taken = leases_take(lease, names.values())
    return {user_id for user_id, name in names.items() if name in taken}


def lease_wait(lease: Lease, name: str, *, seconds: float) -> None:
    """Take the lease `name`, waiting up to `seconds` while another holder has it; raise
    `SweepBusy` when it is still held then."""
    deadline = time.monotonic() + seconds
    while not lease_take(lease, name):
        if time.monotonic() >= deadline:
            raise SweepBusy(
                "another sweep is working on these tasks right now; try again in a minute"
            )
        time.sleep(0.25)


def lease_keep(lease: Lease) -> bool:
    """Renew the holder's leases when less than half their life is left; False when one was
    lost (taken over after this holder stalled past its expiry): stop working then.

    One statement when a renewal is due, none otherwise.
    """
    if lease.lost:
        return False
    if not lease.names or lease.expires_at is None:
        return True
    now = timezone.now()
    if lease.expires_at - now > lease.ttl() / 2:
        return True
    expires_at = now + lease.ttl()
    renewed = SweepState.objects.filter(name__in=lease.names, lease_token=lease.token).update(
        lease_expires_at=expires_at
    )
    if renewed != len(lease.names):
        logger.warning(
            "auto memory: sweep lease lost (%d of %s held); stopping this sweep",
            renewed,
            sorted(lease.names),
        )
        lease.lost = True
        return False
    lease.expires_at = expires_at
    return True


def leases_release(lease: Lease, names: Iterable[str] | None = None) -> None:
    """Let go of `names` (default: every lease held), so the next sweeper need not wait."""
    names = set(lease.names if names is None else names) & lease.names
    if not names:
        return
    SweepState.objects.filter(name__in=names, lease_token=lease.token).update(
        lease_token=None, lease_expires_at=None
    )
    lease.names -= names
    if not lease.names:
        lease.expires_at = None
