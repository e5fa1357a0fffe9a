"""Retraction: the memory of a task that saw external context after it was written is withdrawn.

A task can be continued after its memory was written, and a later turn may call an MCP
server or search the web. When the sweep finds such a task completed again (with
`disable_on_external_context` on), its memory is withdrawn as if the task had been skipped
from the start, and the task is never extracted again.
"""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from automemory.models import AutoMemoryLog, Outcome, Reason
from automemory.services.memory_goals import goal_key_of
from controlplane.models import IdentityMemory, MemorySource, MemoryStatus, Task
from controlplane.services.audit import audit_record


@transaction.atomic
def memory_retract(task: Task, *, seen: str, now: datetime, force: bool) -> bool:
    """Withdraw the memory of an extracted task that saw external context since.

    The memory becomes `superseded` with no successor; if it was the goal's active memory,
    the memory it displaced (the latest-finished one pointing to it) is active again, as if
    the retracted task had been skipped from the start; so are the memories of other goals a
    consolidation `supersede` retired in its favour. The log row turns into a stable
    `external_context` skip marked `retracted_at`, so the task is never extracted again.
    Returns False when another sweep retracted it first.
    """
    log = (
        AutoMemoryLog.objects.select_for_update()
        .filter(task_id=task.pk, outcome=Outcome.EXTRACTED)
        .first()
    )
    if log is None:
        return False
    memory = (
        IdentityMemory.objects.select_for_update(of=("self",))
        .filter(source=MemorySource.AUTO, source_task_id=task.pk)
        .first()
    )
    restored_id = None
    undone: list[int] = []
    if memory is not None:
        IdentityMemory.objects.filter(pk=memory.pk).update(
            status=MemoryStatus.SUPERSEDED, superseded_by=None, updated_at=timezone.now()
        )
        if memory.status == MemoryStatus.ACTIVE:
            restored_id = _displaced_restore(memory)
        undone = _retirements_undo(memory)
    detail = f"{seen}; retracted memory {memory.pk}" if memory else f"{seen}; memory was deleted"
    if memory is not None and undone:
        detail += f"; restored memory {', '.join(map(str, undone))}"
    if memory is None and log.reason == Reason.MERGED and log.memory_id is not None:
        # Merged text cannot be split: the memory stays, the task is out of later sweeps.
        detail = f"{seen}; merged into memory {log.memory_id}, which is kept"
    AutoMemoryLog.objects.filter(pk=log.pk).update(
        outcome=Outcome.SKIPPED,
        reason=Reason.EXTERNAL_CONTEXT,
        memory=memory,
        forced=force,
        recheck=False,
        attempts=F("attempts") + 1,
        retry_after=None,
        detail=detail,
        last_attempt_at=now,
        retracted_at=now,
    )
    audit_record(
        action="auto_memory_retracted",
        actor_label="auto memory sweep",
        target_type="memory",
        target_id=memory.pk if memory else "",
        data={
            "task_id": task.pk,
            "memory_id": memory.pk if memory else None,
            "restored_memory_id": restored_id,
        },
    )
    return True


def _displaced_restore(retracted: IdentityMemory) -> int | None:
    """Make active again the auto memory the retracted one displaced, if there is one."""
    displaced = (
        _superseded_by(retracted)
        .filter(auto_memory_goal__goal_key=goal_key_of(retracted))
        .order_by(
            F("auto_memory_goal__source_finished_at").desc(nulls_last=True), "-source_task_id"
        )
        .first()
    )
    if displaced is None or not _reactivated(displaced):
        return None
    return displaced.pk


def _retirements_undo(retracted: IdentityMemory) -> list[int]:
    """Make active again the memories of other goals that a `supersede` answer retired in
    favour of `retracted` (a memory being withdrawn); returns their ids.

    Call inside the retraction's transaction.
    """
    retired = (
        _superseded_by(retracted)
        .exclude(auto_memory_goal__goal_key=goal_key_of(retracted))
        .order_by("pk")
    )
    return [memory.pk for memory in retired if _reactivated(memory)]


def _superseded_by(retracted: IdentityMemory) -> QuerySet[IdentityMemory]:
    """The auto memories of `retracted`'s project that it superseded, locked when read."""
    return IdentityMemory.objects.select_for_update(of=("self",)).filter(
        superseded_by=retracted,
        source=MemorySource.AUTO,
        status=MemoryStatus.SUPERSEDED,
        project_id=retracted.project_id,
    )


def _reactivated(memory: IdentityMemory) -> bool:
    """Make a superseded memory active again, in a savepoint; False, and it stays superseded,
    when its goal has an active memory again meanwhile (the per-goal constraint decides)."""
    try:
        with transaction.atomic():
            IdentityMemory.objects.filter(pk=memory.pk).update(
                status=MemoryStatus.ACTIVE, superseded_by=None, updated_at=timezone.now()
            )
    except IntegrityError:
        return False
    return True
