"""Retention: archive auto memories nobody used for a while (the `max_unused_days` setting).

Memories belong to projects while the setting belongs to a user, so the setting of the user
whose task an auto memory was extracted from governs it (its source task's user, stored as
the memory's `created_by` when it is written). A memory is unused when no task cited it and
nobody wrote it (created, edited by hand, merged into by consolidation, approved or
restored) in that many days: the later of the memory's `updated_at` and its
`MemoryState.last_cited_at` (auto memory's own row). Being injected is not use: a memory
put in front of every task that no task cites ages out like one never injected. Restoring
a memory restarts its clock instead of having the next pass archive it again. Manual
memories are never archived.

Archived memories get status `archived` and `archived_at`, stay listed and can be restored
(`POST /memories/{id}/restore`, the admin's restore action). Each one is logged (logger and a
`memory_archived` audit event). A pass reads one row per user who turned retention on, then
only the candidates, through `memory_auto_updated_idx` (a memory last used before the
cutoff was last written before it too), and checks their last citation in the same
statement: its cost grows with the work pending, not with the history.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from automemory import conf
from automemory.models import AutoMemorySettings
from controlplane.models import (
    AuditEvent,
    IdentityMemory,
    MemorySource,
    MemoryStatus,
)

logger = logging.getLogger(__name__)


def retention_batch_size() -> int:
    """The most memories one pass archives (`AUTOMEMORY_RETENTION_BATCH_SIZE`)."""
    return int(conf.get("RETENTION_BATCH_SIZE"))


def retention_interval_seconds() -> float:
    """How often a worker runs a pass (`AUTOMEMORY_RETENTION_INTERVAL_SECONDS`)."""
    return float(conf.get("RETENTION_INTERVAL_SECONDS"))


@dataclass
class RetentionSummary:
    """What one pass did: users whose memories it examined, memories it archived."""

    users: int = 0
    archived: int = 0
    archived_ids: list[int] = field(default_factory=list)
    # True when the batch ran out: more stale memories may be waiting for the next pass.
    more: bool = False

    def as_dict(self) -> dict:
        return {
            "users": self.users,
            "archived": self.archived,
            "archived_ids": list(self.archived_ids),
            "more": self.more,
        }


def _stale_memories(*, user_id: int, cutoff: datetime):
    return (
        IdentityMemory.objects.filter(
            created_by_id=user_id, source=MemorySource.AUTO, status=MemoryStatus.ACTIVE
        )
        .filter(updated_at__lt=cutoff)
        .filter(
            Q(auto_memory_state__last_cited_at__isnull=True)
            | Q(auto_memory_state__last_cited_at__lt=cutoff)
        )
    )


def memories_archive_unused(
    *, now: datetime, batch: int | None = None, user=None
) -> RetentionSummary:
    """Archive the auto memories unused for their governing user's `max_unused_days`.

    At most `batch` memories per pass (`more` says when some were left for the next one);
    `user` limits the pass to one user's setting and memories. Each user's memories are
    archived in their own transaction, re-checking the condition in the update, so a memory
    cited or restored meanwhile stays active; rows another pass holds are skipped.
    """
    batch = retention_batch_size() if batch is None else batch
    summary = RetentionSummary()
    if batch <= 0:
        return summary
    enabled = AutoMemorySettings.objects.filter(max_unused_days__gt=0)
    if user is not None:
        enabled = enabled.filter(user=user)
    for user_id, days in enabled.order_by("user_id").values_list("user_id", "max_unused_days"):
        remaining = batch - summary.archived
        if remaining <= 0:
            summary.more = True
            break
        summary.users += 1
        cutoff = now - timedelta(days=days)
        archived = _archive_for_user(user_id=user_id, cutoff=cutoff, now=now, limit=remaining)
        for memory_id, project_id in archived:
            summary.archived_ids.append(memory_id)
            logger.info(
                "memory %s of project %s archived: unused for %s days (user %s)",
                memory_id,
                project_id,
                days,
                user_id,
            )
        summary.archived += len(archived)
        if len(archived) == remaining and _stale_memories(user_id=user_id, cutoff=cutoff).exists():
            summary.more = True
    if summary.archived:
        logger.info(
            "retention: archived %s memories of %s users%s",
            summary.archived,
            summary.users,
            " (more wait for the next pass)" if summary.more else "",
        )
    return summary


def _archive_for_user(
    *, user_id: int, cutoff: datetime, now: datetime, limit: int
) -> list[tuple[int, int]]:
    stale = _stale_memories(user_id=user_id, cutoff=cutoff)
    # A plain read first: a pass with nothing to archive opens no write transaction.
    candidate_ids = list(stale.order_by().values_list("pk", flat=True)[:limit])
    if not candidate_ids:
        return []
    with transaction.atomic():
        # Locked and read again: a memory cited or restored since the read is not stale.
        candidates = list(
            stale.filter(pk__in=candidate_ids)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by()
            .values_list("pk", "project_id")
        )
        if not candidates:
            return []
        IdentityMemory.objects.filter(pk__in=[pk for pk, _ in candidates]).update(
            status=MemoryStatus.ARCHIVED, archived_at=now
        )
        # One insert for the batch's audit events (append-only rows, as audit_record writes).
        AuditEvent.objects.bulk_create(
            AuditEvent(
                action="memory_archived",
                actor_label="retention",
                target_type="memory",
                target_id=str(pk),
                data={"project_id": project_id, "user_id": user_id, "cutoff": cutoff.isoformat()},
            )
            for pk, project_id in candidates
        )
    return candidates
