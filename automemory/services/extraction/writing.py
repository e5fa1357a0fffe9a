"""Writing: a task's memory, its provenance link and its log row, in one transaction.

The writer every extraction uses. A `Decision` says how the memory joins the project's
memories: `add` (the default, and the only one without a consolidation model) under the
same-goal rule (of two memories of one (project, goal), the one whose task finished later
stays active), `update` (merged into one memory), `supersede` (the new memory replaces
others) or `noop` (already known). It is applied after locking, in id order, the goal's
active memory and the memories it names, and re-checking that those are still active auto
memories of the project (else it is written as `add`, and the detail says why).

A memory held for its author (privacy by consent: `held`) joins only that author's held
memories of the goal: it never merges into, nor retires, a memory the project sees (such an
answer is written as `add`, saying why), so nothing of a private note reaches the project
before its author shares it.

The database keeps the invariants whatever two writers do at once: one auto memory per
source task, one provenance link per task, at most one active auto memory per (project,
goal) that the project sees, and one per (project, goal, author) held for its author.
Losing one of those races is an IntegrityError: the task's memory exists (another writer
won; `AlreadyExtracted`) or the goal's active memory changed (written again).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from automemory.models import AutoMemoryLog, Outcome, Reason
from automemory.services.citations.extracted import task_citations, task_citations_store
from automemory.services.extraction.drafts import drafts_discard
from automemory.services.extraction.log import log_row_write
from automemory.services.extraction.summary import Verdict
from automemory.services.text import keywords_clean
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemorySourceTask,
    MemoryStatus,
    MemoryVisibility,
    Task,
)
from controlplane.services.instructions import instruction_flag_fields

logger = logging.getLogger(__name__)


class Action:
    ADD = "add"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    NOOP = "noop"


ACTIONS = (Action.ADD, Action.UPDATE, Action.SUPERSEDE, Action.NOOP)
# The reasons of a write that made a new memory (it gets the task's citations; a merge keeps
# the citations its memory had).
WRITTEN_NEW = (Reason.NEW, Reason.SUPERSEDED, Reason.SUPERSEDED_ON_WRITE, Reason.HELD_FOR_AUTHOR)


@dataclass(frozen=True)
class Decision:
    """How a new memory joins the project's memories (checked against the candidates the
    consolidation model was shown)."""

    action: str
    memory_id: int | None = None
    memory_ids: tuple[int, ...] = ()
    text: str = ""
    reason: str = ""


@dataclass
class WriteResult:
    """What writing one task's memory did: the log's outcome, reason, memory and detail."""

    outcome: str
    reason: str
    memory_id: int | None
    superseded_count: int = 0
    detail: str = ""
    superseded_ids: list[int] = field(default_factory=list)


class AlreadyExtracted(Exception):
    """Another writer wrote this task's memory first (or merged the task into a memory)."""

    def __init__(self, *, memory_id: int | None, reason: str):
        super().__init__(f"already extracted into memory {memory_id}")
        self.memory_id = memory_id
        self.reason = reason


def extraction_write(
    task: Task,
    *,
    content: str,
    keywords: Sequence[str],
    key: str,
    decision: Decision | None,
    note: str,
    previous_log: AutoMemoryLog | None,
    now: datetime,
    force: bool,
    held: bool = False,
    discard_draft: bool = True,
    attempts: int = 3,
    citations: Sequence[dict] | None = (),
) -> Verdict:
    """Write the task's memory as `decision` says, with its log row, in one transaction, and
    forget its kept draft (`discard_draft`: it may have one); return the verdict (logged).

    Raises `AlreadyExtracted` when another writer won the one-memory-per-task race; retries
    a lost one-active-per-goal race. `note` goes in front of the log detail. `citations`:
    the model's (None: from the task's diff), checked against the task's head commit before
    the transaction; a new memory gets those that hold, the detail says which were dropped.
    """
    cited = task_citations(task, None if citations is None else list(citations), content=content)
    note = "; ".join(part for part in (note, cited.note) if part)
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                written = memory_decision_apply(
                    task=task,
                    content=content,
                    keywords=keywords,
                    key=key,
                    decision=decision,
                    held=held,
                )
                if written.memory_id is not None and written.reason in WRITTEN_NEW:
                    task_citations_store(written.memory_id, cited)
                detail = "; ".join(part for part in (note, written.detail) if part)
                verdict = Verdict(
                    written.outcome,
                    written.reason,
                    detail,
                    written.memory_id,
                    superseded_count=written.superseded_count,
                    logged=True,
                )
                log_row_write(task, verdict, previous_log, now=now, force=force)
                if discard_draft:
                    drafts_discard([task.pk])
                return verdict
        except IntegrityError:
            _raise_if_written_elsewhere(task)
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _raise_if_written_elsewhere(task: Task) -> None:
    link = (
        MemorySourceTask.objects.filter(task_id=task.pk).values_list("memory_id", "merged").first()
    )
    if link is not None:
        raise AlreadyExtracted(memory_id=link[0], reason=Reason.MERGED if link[1] else Reason.NEW)
    memory_id = (
        IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task_id=task.pk)
        .values_list("pk", flat=True)
        .first()
    )
    if memory_id is not None:
        raise AlreadyExtracted(memory_id=memory_id, reason=Reason.NEW)


def memory_decision_apply(
    *,
    task: Task,
    content: str,
    keywords: Sequence[str],
    key: str,
    decision: Decision | None = None,
    held: bool = False,
) -> WriteResult:
    """Write the task's memory as `decision` says (None: `add`); call inside a transaction.

    `held`: the memory is held for the task's user (see the module's docstring). Raises
    IntegrityError when another writer won a race on the per-task or per-goal constraint
    (the caller retries or stops).
    """
    decision = decision or Decision(Action.ADD)
    named = set(decision.memory_ids)
    if decision.memory_id is not None:
        named.add(decision.memory_id)
    visibility = MemoryVisibility.AUTHOR if held else MemoryVisibility.PROJECT
    goal_current = Q(
        project_id=task.project_id,
        goal_key=key,
        source=MemorySource.AUTO,
        status="active",
        visibility=visibility,
    )
    if held:
        goal_current &= Q(created_by_id=task.user_id)
    locked = list(
        IdentityMemory.objects.select_for_update()
        .filter(goal_current | Q(pk__in=named))
        .order_by("pk")
    )
    usable = {
        memory.pk: memory
        for memory in locked
        if memory.project_id == task.project_id
        and memory.source == MemorySource.AUTO
        and memory.status == MemoryStatus.ACTIVE
        and _may_change(memory, task=task, held=held)
    }
    current = next(
        (
            m
            for m in usable.values()
            if m.goal_key == key and m.source_task_id != task.pk and m.visibility == visibility
        ),
        None,
    )
    gone = sorted(named - set(usable))
    note = ""
    if decision.action in (Action.UPDATE, Action.SUPERSEDE) and gone:
        why = "is not the author's own" if held else "is no longer active in the project"
        note = (
            f"{decision.action} not applied: memory {', '.join(map(str, gone))} {why}; "
            "written as a new memory"
        )
        logger.info("auto memory: task %s: %s", task.pk, note)
        decision = Decision(Action.ADD)
    elif (
        decision.action == Action.NOOP
        and decision.memory_id not in usable
        and not _known_by(decision.memory_id, locked, task=task)
    ):
        note = f"noop not applied: memory {decision.memory_id} is no longer active"
        decision = Decision(Action.ADD)
    if decision.action == Action.NOOP:
        return WriteResult(
            Outcome.SKIPPED,
            Reason.ALREADY_KNOWN,
            decision.memory_id,
            detail=f"already known by memory {decision.memory_id}",
        )
    if decision.action == Action.UPDATE:
        return _merge(task, usable[decision.memory_id], decision=decision, keywords=keywords)
    result = memory_add(
        task=task, content=content, keywords=keywords, key=key, current=current, held=held
    )
    if note:
        result.detail = "; ".join(part for part in (note, result.detail) if part)
    if decision.action == Action.SUPERSEDE:
        _supersede(result, decision=decision, current=current)
    if held and result.reason != Reason.SUPERSEDED_ON_WRITE:
        result.reason = Reason.HELD_FOR_AUTHOR
        result.detail = "; ".join(
            part
            for part in (
                "held for its author until shared (the task received their own memories)",
                result.detail,
            )
            if part
        )
    return result


def _may_change(memory: IdentityMemory, *, task: Task, held: bool) -> bool:
    """Whether a write of `task` may merge into or retire `memory`: one the project sees by
    a write the project sees; the author's own held memory by a held write."""
    if memory.visibility == MemoryVisibility.PROJECT:
        return not held
    return held and memory.created_by_id == task.user_id


def _known_by(memory_id: int | None, locked: list[IdentityMemory], *, task: Task) -> bool:
    """Whether `memory_id` is an active memory the task's user sees (a `noop` may name any)."""
    for memory in locked:
        if memory.pk == memory_id and memory.status == MemoryStatus.ACTIVE:
            return memory.visibility == MemoryVisibility.PROJECT or (
                memory.created_by_id == task.user_id
            )
    return False


def _supersede(result: WriteResult, *, decision: Decision, current: IdentityMemory | None):
    """Retire the memories a `supersede` answer names in favour of the new one."""
    retired = [pk for pk in decision.memory_ids if current is None or pk != current.pk]
    if result.reason == Reason.SUPERSEDED_ON_WRITE:
        result.detail = "supersede not applied: a later task of the same goal has the active memory"
    elif retired:
        IdentityMemory.objects.filter(pk__in=retired).update(
            status=MemoryStatus.SUPERSEDED,
            superseded_by_id=result.memory_id,
            updated_at=timezone.now(),
        )
        result.reason = Reason.SUPERSEDED
        result.superseded_count += len(retired)
        result.superseded_ids += retired
        result.detail = f"superseded memory {', '.join(map(str, result.superseded_ids))}"


def memory_add(
    *,
    task: Task,
    content: str,
    keywords: Sequence[str],
    key: str,
    current: IdentityMemory | None,
    held: bool = False,
) -> WriteResult:
    """Write the task's memory under the same-goal rule; `current`: the goal's active memory
    of the same visibility (held: the author's own), locked by the caller (None: none).

    When `current`'s task finished later, the new memory is history from the start:
    written superseded by `current` (reason `superseded_on_write`). Otherwise `current`
    is retired first (so the partial unique index holds) and points to the new memory
    (reason `superseded`), or there was none (reason `new`).
    """
    memory = IdentityMemory(
        scope=MemoryScope.PROJECT,
        project_id=task.project_id,
        content=content,
        keywords=keywords_clean(keywords),
        source=MemorySource.AUTO,
        source_task_id=task.pk,
        goal_key=key,
        source_finished_at=task.finished_at,
        created_by_id=task.user_id,
        visibility=MemoryVisibility.AUTHOR if held else MemoryVisibility.PROJECT,
        **instruction_flag_fields(content),
    )
    if current is not None and finished_later(current, task):
        memory.status = MemoryStatus.SUPERSEDED
        memory.superseded_by = current
        memory.save()
        _link(memory, task, merged=False)
        return WriteResult(
            Outcome.EXTRACTED,
            Reason.SUPERSEDED_ON_WRITE,
            memory.pk,
            superseded_count=1,
            detail=f"superseded at once by memory {current.pk}, whose task finished later",
        )
    if current is not None:
        IdentityMemory.objects.filter(pk=current.pk).update(
            status=MemoryStatus.SUPERSEDED, updated_at=timezone.now()
        )
    memory.save()
    _link(memory, task, merged=False)
    if current is None:
        return WriteResult(Outcome.EXTRACTED, Reason.NEW, memory.pk)
    IdentityMemory.objects.filter(pk=current.pk).update(superseded_by=memory)
    return WriteResult(
        Outcome.EXTRACTED,
        Reason.SUPERSEDED,
        memory.pk,
        superseded_count=1,
        detail=f"superseded memory {current.pk}",
        superseded_ids=[current.pk],
    )


def _merge(
    task: Task, target: IdentityMemory, *, decision: Decision, keywords: Sequence[str]
) -> WriteResult:
    """Merge the task into `target` (locked): the model's merged text (flagged afresh, so an
    earlier approval does not cover it), both keyword lists, and a `merged` provenance link
    from the task."""
    IdentityMemory.objects.filter(pk=target.pk).update(
        content=decision.text,
        keywords=keywords_clean([*(target.keywords or []), *keywords]),
        updated_at=timezone.now(),
        **instruction_flag_fields(decision.text),
    )
    _link(target, task, merged=True)
    return WriteResult(
        Outcome.EXTRACTED, Reason.MERGED, target.pk, detail=f"merged into memory {target.pk}"
    )


def _link(memory: IdentityMemory, task: Task, *, merged: bool) -> None:
    """Provenance: the task's knowledge is in `memory` (unique per task: IntegrityError when
    another writer linked the task first)."""
    MemorySourceTask.objects.create(memory=memory, task=task, merged=merged)


def finished_later(memory: IdentityMemory, task: Task) -> bool:
    """True when the memory's source task finished after `task` (ties: the higher task id)."""
    theirs = memory.source_finished_at
    mine = task.finished_at
    if theirs is None or mine is None:
        return theirs is not None and mine is None
    if theirs != mine:
        return theirs > mine
    return (memory.source_task_id or 0) > task.pk
