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

A task whose extraction was paid for but whose consolidation failed keeps its draft (text,
keywords and the task's `updated_at`) in its row, released by expiring it rather than
deleting it: the sweep that claims the task next reads the draft back with its claim and
uses it instead of calling the extraction model again, unless the task changed since.
"""

import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, transaction
from django.db.models import Case, DateTimeField, JSONField, TextField, Value, When
from django.utils import timezone

from automemory import conf
from automemory.models import ExtractionClaim

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeptDraft:
    """A paid extraction's text and keywords, valid while the task's `updated_at` is this."""

    content: str
    keywords: list[str]
    task_updated_at: datetime


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
    # Claimed, but found answered by another sweep since this one read them: left alone.
    answered: set[int] = field(default_factory=set)
    # Drafts found in the rows this sweep claimed (kept by an earlier sweep), and those this
    # sweep keeps for the next one when it releases its claims.
    found: dict[int, KeptDraft] = field(default_factory=dict)
    to_keep: dict[int, KeptDraft] = field(default_factory=dict)
    # Whether this sweep tried to claim anything (its release then deletes by token even
    # when it knows of no row it holds: a failed claim may have written some).
    touched: bool = False
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
    Rows are locked in task order, and an expired row another sweep is taking over at the
    same moment is skipped (`SKIP LOCKED` on PostgreSQL), so two sweeps never wait on each
    other in a cycle. A database error leaves the tasks refused (they wait for a later sweep).
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
    expired = (
        ExtractionClaim.objects.filter(task_id__in=wanted, expires_at__lt=now)
        .order_by("task_id")
        .select_for_update(skip_locked=True)
        .values("task_id")
    )
    claims.touched = True
    try:
        with transaction.atomic():  # one statement; FOR UPDATE needs a transaction
            ExtractionClaim.objects.filter(task_id__in=expired, expires_at__lt=now).update(**values)
        ExtractionClaim.objects.bulk_create(
            [ExtractionClaim(task_id=task_id, **values) for task_id in wanted],
            ignore_conflicts=True,
        )
        rows = list(
            ExtractionClaim.objects.filter(task_id__in=wanted, token=claims.token).values_list(
                "task_id", "draft_content", "draft_keywords", "draft_task_updated_at"
            )
        )
    except DatabaseError:
        logger.warning(
            "auto memory: tasks %s could not be claimed; left for a later sweep",
            wanted,
            exc_info=True,
        )
        claims.refused |= set(wanted)
        return set()
    mine = set()
    for task_id, content, keywords, task_updated_at in rows:
        mine.add(task_id)
        if content and task_updated_at is not None:
            claims.found[task_id] = KeptDraft(content, list(keywords or []), task_updated_at)
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


def extraction_claims_keep_draft(claims: SweepClaims, task_id: int, draft: KeptDraft) -> None:
    """Have the release keep `draft` in the claim row of `task_id` (held by this sweep)."""
    if task_id in claims.held:
        claims.to_keep[task_id] = draft


def extraction_claims_release(claims: SweepClaims) -> int:
    """Let go of this sweep's claims; return how many there were.

    One DELETE (by token), and when drafts are to be kept one UPDATE that writes them into
    their rows and expires those rows, so the next sweep may claim the tasks at once.
    """
    if not claims.held and not claims.touched:
        return 0
    count = len(claims.held)
    kept = {task_id: draft for task_id, draft in claims.to_keep.items() if task_id in claims.held}
    if kept:

        def by_task(values: dict[int, object], output_field) -> Case:
            whens = [
                When(task_id=task_id, then=value if isinstance(value, Value) else Value(value))
                for task_id, value in values.items()
            ]
            return Case(*whens, output_field=output_field)

        ExtractionClaim.objects.filter(token=claims.token, task_id__in=list(kept)).update(
            draft_content=by_task({t: d.content for t, d in kept.items()}, TextField()),
            draft_keywords=by_task(
                {t: Value(d.keywords, JSONField()) for t, d in kept.items()}, JSONField()
            ),
            draft_task_updated_at=by_task(
                {t: d.task_updated_at for t, d in kept.items()}, DateTimeField()
            ),
            expires_at=timezone.now(),
        )
    ExtractionClaim.objects.filter(token=claims.token).exclude(task_id__in=list(kept)).delete()
    claims.held = set()
    claims.to_keep = {}
    claims.expires_at = None
    claims.touched = False
    return count
