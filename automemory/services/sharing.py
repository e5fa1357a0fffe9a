"""Sharing: a memory held for its author becomes the project's when the author says so.

An auto memory drawn from a task that received its user's own memories, in a project with
other members, is written held for that user (`visibility` author; see
`extraction/privacy.py`). Its author reads it, and when what it says is fine for the team,
shares it (`POST /memories/{id}/share`, the console's Share button): from then on it is
listed, injected and found like any memory of the project. Sharing cannot be undone (the
members may have read it); the author may still edit or forget it.

Sharing an active memory of a goal that also has an active memory the project sees applies
the same-goal rule there and then: the memory whose task finished later stays active, the
other is superseded by it.
"""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from automemory.services.memory_goals import goal_key_of, source_finished_at_of
from controlplane.errors import ConflictError
from controlplane.models import IdentityMemory, MemorySource, MemoryStatus, MemoryVisibility
from controlplane.services.audit import audit_record
from controlplane.services.memories import memory_locked

logger = logging.getLogger(__name__)


def _finished_later(one: IdentityMemory, other: IdentityMemory) -> bool:
    """Whether `one`'s source task finished after `other`'s (ties: the higher task id)."""
    mine, theirs = source_finished_at_of(one), source_finished_at_of(other)
    if mine is None or theirs is None:
        return mine is not None and theirs is None
    if mine != theirs:
        return mine > theirs
    return (one.source_task_id or 0) > (other.source_task_id or 0)


@transaction.atomic
def memory_share(*, user, memory: IdentityMemory) -> IdentityMemory:
    """Make `memory`, held for its author `user`, the project's; return it.

    409 when it is not held (already the project's), 404 when it was deleted meanwhile (the
    row is locked first, so a share racing a delete either happens before it or not at
    all). The caller has checked that `user` is
    its author and still a member (see controlplane.access).
    """
    locked = memory_locked(memory)
    if locked.visibility != MemoryVisibility.AUTHOR:
        raise ConflictError("This memory is already the project's.")
    superseded: int | None = None
    kept_by: int | None = None
    now = timezone.now()
    if locked.source == MemorySource.AUTO and locked.status == MemoryStatus.ACTIVE:
        current = (
            IdentityMemory.objects.select_for_update(of=("self",))
            .select_related("auto_memory_goal")
            .filter(
                project_id=locked.project_id,
                auto_memory_goal__goal_key=goal_key_of(locked),
                source=MemorySource.AUTO,
                status=MemoryStatus.ACTIVE,
                visibility=MemoryVisibility.PROJECT,
            )
            .first()
        )
        if current is not None and _finished_later(current, locked):
            locked.status = MemoryStatus.SUPERSEDED
            locked.superseded_by = current
            kept_by = current.pk
        elif current is not None:
            IdentityMemory.objects.filter(pk=current.pk).update(
                status=MemoryStatus.SUPERSEDED, superseded_by=locked, updated_at=now
            )
            superseded = current.pk
    locked.visibility = MemoryVisibility.PROJECT
    try:
        with transaction.atomic():
            locked.save(update_fields=["visibility", "status", "superseded_by", "updated_at"])
    except IntegrityError:
        # A sweep wrote a memory of the goal for the project between the read and the save.
        raise ConflictError(
            "The project got another memory of the same goal meanwhile; try again."
        ) from None
    audit_record(
        action="memory_shared",
        actor=user,
        target_type="memory",
        target_id=locked.pk,
        data={
            "project_id": locked.project_id,
            "superseded_memory_id": superseded,
            "superseded_by_memory_id": kept_by,
        },
    )
    logger.info("memory %s shared with project %s by its author", locked.pk, locked.project_id)
    return locked
