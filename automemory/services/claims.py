"""Extraction claims: one sweep at a time calls the memory model for a task.

Every worker sweeps at the end of its rounds, so two sweeps may read the same candidate.
Before a task's model calls (its extraction and consolidation together) the sweep claims it:
a row in `automemory_extractionclaim` keyed by the task, inserted with ON CONFLICT DO
NOTHING, or an expired row taken over with a conditional UPDATE (`expires_at < now`). Both
are single statements, so on PostgreSQL (row locks, the WHERE re-checked after a wait) and
SQLite (one writer at a time) exactly one sweep ends up holding the row; which rows are
whose is read back by the sweep's random token. No transaction is held open and no session
lock is taken, so this works behind a transaction-mode pooler.

A claim lives `AUTOMEMORY_EXTRACTION_CLAIM_SECONDS`; the sweep renews its claims while it
works and deletes them (by token) once the tasks' log rows are written, whatever happened.
A sweep that dies leaves claims that expire, and the next sweep takes the tasks over.
"""

import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from automemory import conf
from automemory.models import ExtractionClaim

logger = logging.getLogger(__name__)


def claim_holder_label() -> str:
    """Who holds a claim, for operators reading the table: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"[:200]


@dataclass
class SweepClaims:
    """One sweep's claims: its token, the tasks it holds, those another sweep holds."""

    label: str = field(default_factory=claim_holder_label)
    token: uuid.UUID = field(default_factory=uuid.uuid4)
    held: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)
    # The earliest expiry among the held claims (None: none held).
    expires_at: datetime | None = None

    @property
    def ttl(self) -> timedelta:
        return timedelta(seconds=conf.get("EXTRACTION_CLAIM_SECONDS"))


def extraction_claims_take(claims: SweepClaims, task_ids: Iterable[int]) -> set[int]:
    """Claim the tasks `task_ids` for this sweep; return those it now holds.

    Three statements whatever the number of tasks: take over the expired claims among them,
    insert the missing ones (a conflict is another sweep's claim), read back which carry
    this sweep's token. A task held by a live claim of another sweep goes to `refused`.
    """
    wanted = sorted({task_id for task_id in task_ids if task_id not in claims.held})
    if not wanted:
        return set()
    now = timezone.now()
    expires_at = now + claims.ttl
    values = {
        "token": claims.token,
        "claimed_by": claims.label,
        "claimed_at": now,
        "expires_at": expires_at,
    }
    ExtractionClaim.objects.filter(task_id__in=wanted, expires_at__lt=now).update(**values)
    ExtractionClaim.objects.bulk_create(
        [ExtractionClaim(task_id=task_id, **values) for task_id in wanted], ignore_conflicts=True
    )
    mine = set(
        ExtractionClaim.objects.filter(task_id__in=wanted, token=claims.token).values_list(
            "task_id", flat=True
        )
    )
    claims.held |= mine
    claims.refused |= set(wanted) - mine
    if mine:
        claims.expires_at = min(filter(None, (claims.expires_at, expires_at)))
    return mine


def extraction_claims_keep(claims: SweepClaims) -> set[int]:
    """Renew this sweep's claims when less than half their lifetime is left; return those
    still held.

    Called before each claimed task's model calls, so a sweep slowed by a hanging model keeps
    its tasks; usually it costs nothing. A claim found taken over (this sweep stalled past
    its expiry) is dropped from `held`, and its task must be left alone.
    """
    if not claims.held or claims.expires_at is None:
        return claims.held
    now = timezone.now()
    if claims.expires_at - now > claims.ttl / 2:
        return claims.held
    expires_at = now + claims.ttl
    renewed = ExtractionClaim.objects.filter(token=claims.token).update(expires_at=expires_at)
    if renewed != len(claims.held):
        still = set(
            ExtractionClaim.objects.filter(token=claims.token).values_list("task_id", flat=True)
        )
        lost = claims.held - still
        logger.warning(
            "auto memory: claims on tasks %s expired and were taken over; left to their holder",
            sorted(lost),
        )
        claims.held = still
    claims.expires_at = expires_at
    return claims.held


def extraction_claims_release(claims: SweepClaims) -> int:
    """Delete this sweep's claims (one statement); return how many there were."""
    if not claims.held:
        return 0
    released, _ = ExtractionClaim.objects.filter(token=claims.token).delete()
    claims.held = set()
    claims.expires_at = None
    return released
