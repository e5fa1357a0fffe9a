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
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from automemory.models import AutoMemoryLog, ExtractionDraft, MemorySourceTask, Outcome, Reason
from automemory.services.citations.anchors import TaskCitations
from automemory.services.citations.store import task_citations_store
from automemory.services.extraction.log import Verdict, log_row_write
from automemory.services.memory_goals import goal_key_of, memory_goal_store, source_finished_at_of
from automemory.services.memory_state import memory_flags_write
from automemory.services.search import memory_keywords, memory_keywords_set
from automemory.services.text import keywords_clean
from controlplane.models import (
    IdentityMemory,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    MemoryVisibility,
    Task,
)

logger = logging.getLogger(__name__)


class Action:
    ADD = "add"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    NOOP = "noop"


ACTIONS = (Action.ADD, Action.UPDATE, Action.SUPERSEDE, Action.NOOP)
# The reasons of a write that made a new memory (it gets the task's citations; a merge keeps
# the citations its memory had).


@dataclass(frozen=True)
class NewMemory:
    """A task's new memory on its way to be written: its text and keywords (cleaned by
    drafting), and whether it is held for the task's user (`held`, see the module)."""

    task: Task
    content: str
    keywords: Sequence[str] = ()
    held: bool = False


@dataclass(frozen=True)
class Decision:
    """How a new memory joins the project's memories (checked against the candidates the
    consolidation model was shown)."""

    action: str
    memory_id: int | None = None
    memory_ids: tuple[int, ...] = ()
    text: str = ""
    reason: str = ""


@dataclass(frozen=True)
class WriteResult:
    """What writing one task's memory did: the log's outcome, reason, memory and detail, and
    how many memories it made superseded."""

    outcome: str
    reason: str
    memory_id: int | None
    superseded_count: int = 0
    detail: str = ""


class AlreadyExtracted(Exception):
    """Another writer wrote this task's memory first (or merged the task into a memory)."""

    def __init__(self, *, memory_id: int | None, reason: str):
        super().__init__(f"already extracted into memory {memory_id}")
        self.memory_id = memory_id
        self.reason = reason


def extraction_write(
    new: NewMemory,
    *,
    key: str,
    decision: Decision | None,
    note: str,
    previous_log: AutoMemoryLog | None,
    now: datetime,
    force: bool,
    discard_draft: bool = True,
    attempts: int = 3,
    cited: TaskCitations | None = None,
) -> Verdict:
    """Write the task's `new` memory as `decision` says, with its log row, in one
    transaction, and forget its kept draft (`discard_draft`: it may have one); return the
    verdict (logged).

    Raises `AlreadyExtracted` when another writer won the one-memory-per-task race; retries
    a lost one-active-per-goal race. `note` goes in front of the log detail. `cited`: the
    citations checked against the task's head commit (`task_citations`, before the
    transaction), which a new memory gets.
    """
    task = new.task
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                written = memory_decision_apply(new, key=key, decision=decision, cited=cited)
                detail = f"{note}; {written.detail}" if note and written.detail else note
                detail = detail or written.detail
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
                    ExtractionDraft.objects.filter(task_id=task.pk).delete()
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
    new: NewMemory,
    *,
    key: str,
    decision: Decision | None = None,
    cited: TaskCitations | None = None,
) -> WriteResult:
    """Write the task's `new` memory as `decision` says (None: `add`); call inside a
    transaction. A new memory is written with auto memory's rows of it: its search words,
    goal, instruction flags, provenance link and the citations `cited` holds.

    Under the same-goal rule, when the goal's active memory (`current`) came from a task
    that finished later, the new memory is history from the start: written superseded by
    `current` (reason `superseded_on_write`). Otherwise `current` is retired first (so the
    partial unique index holds) and points to the new memory, with those a `supersede`
    names (reason `superseded`), or there was none (reason `new`). Raises IntegrityError
    when another writer won a race on the per-task or per-goal constraint (the caller
    retries or stops).
    """
    task, held = new.task, new.held
    decision = decision or Decision(Action.ADD)
    named = set(decision.memory_ids)
    if decision.memory_id is not None:
        named.add(decision.memory_id)
    visibility = MemoryVisibility.AUTHOR if held else MemoryVisibility.PROJECT
    locked, usable, current = _goal_locked(task, key=key, named=named, held=held)
    # What applies: the decision, or `add` when what it names changed meanwhile.
    action, details = decision.action, []
    gone = sorted(named - set(usable))
    if action in (Action.UPDATE, Action.SUPERSEDE) and gone:
        why = "is not the author's own" if held else "is no longer active in the project"
        details.append(
            f"{action} not applied: memory {', '.join(map(str, gone))} {why}; "
            "written as a new memory"
        )
        logger.info("auto memory: task %s: %s", task.pk, details[-1])
        action = Action.ADD
    elif action == Action.NOOP and not _known_by(decision.memory_id, locked, task=task):
        details.append(f"noop not applied: memory {decision.memory_id} is no longer active")
        action = Action.ADD

    outcome, superseded = Outcome.EXTRACTED, 0
    if action == Action.NOOP:
        outcome, reason, memory_id = Outcome.SKIPPED, Reason.ALREADY_KNOWN, decision.memory_id
        details.append(f"already known by memory {memory_id}")
    elif action == Action.UPDATE:
        memory_id, reason = decision.memory_id, Reason.MERGED
        _merge(task, usable[memory_id], text=decision.text, keywords=new.keywords)
        details.append(f"merged into memory {memory_id}")
    else:
        later = current is not None and finished_later(current, task)
        retired = [current.pk] if current is not None and not later else []
        if action == Action.SUPERSEDE and not later:
            retired += [pk for pk in decision.memory_ids if pk not in retired]
        memory = IdentityMemory(
            scope=MemoryScope.PROJECT,
            project_id=task.project_id,
            content=new.content,
            source=MemorySource.AUTO,
            source_task_id=task.pk,
            created_by_id=task.user_id,
            visibility=visibility,
        )
        if later:
            memory.status, memory.superseded_by = MemoryStatus.SUPERSEDED, current
        elif current is not None:
            # Retired before the new memory is saved, so the partial unique index holds.
            IdentityMemory.objects.filter(pk=current.pk).update(status=MemoryStatus.SUPERSEDED)
        memory.save()
        if new.keywords:
            memory_keywords_set(memory.pk, new.keywords)
        memory_goal_store(memory, goal_key=key, source_finished_at=task.finished_at)
        memory_flags_write(memory_id=memory.pk, text=new.content, created=True)
        MemorySourceTask.objects.create(memory=memory, task=task, merged=False)
        if cited is not None:
            task_citations_store(memory.pk, cited)
        memory_id = memory.pk
        if retired:
            IdentityMemory.objects.filter(pk__in=retired).update(
                status=MemoryStatus.SUPERSEDED, superseded_by=memory, updated_at=timezone.now()
            )
        if later:
            reason, superseded = Reason.SUPERSEDED_ON_WRITE, 1
            details.append(
                "supersede not applied: a later task of the same goal has the active memory"
                if action == Action.SUPERSEDE
                else f"superseded at once by memory {current.pk}, whose task finished later"
            )
        elif retired:
            reason, superseded = Reason.SUPERSEDED, len(retired)
            details.append(f"superseded memory {', '.join(map(str, retired))}")
        else:
            reason = Reason.NEW
        if held and not later:
            reason = Reason.HELD_FOR_AUTHOR
            details.insert(
                0, "held for its author until shared (the task received their own memories)"
            )
    return WriteResult(outcome, reason, memory_id, superseded, "; ".join(details))


def _goal_locked(
    task: Task, *, key: str, named: set[int], held: bool
) -> tuple[list[IdentityMemory], dict[int, IdentityMemory], IdentityMemory | None]:
    """Lock, in id order, the goal's active memory and the memories a decision names; return
    them, those of them this write may change (by id), and the goal's active memory of the
    write's visibility (`current`; held: the author's own; None: none)."""
    visibility = MemoryVisibility.AUTHOR if held else MemoryVisibility.PROJECT
    goal_current = Q(
        auto_memory_goal__project_id=task.project_id,
        auto_memory_goal__goal_key=key,
        auto_memory_goal__active=True,
        auto_memory_goal__visibility=visibility,
    )
    if held:
        goal_current &= Q(auto_memory_goal__author_id=task.user_id)
    locked = list(
        IdentityMemory.objects.select_for_update(of=("self",))
        .select_related("auto_memory_goal")
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
            if goal_key_of(m) == key and m.source_task_id != task.pk and m.visibility == visibility
        ),
        None,
    )
    return locked, usable, current


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


def _merge(task: Task, target: IdentityMemory, *, text: str, keywords: Sequence[str]) -> None:
    """Merge the task into `target` (locked): the model's merged `text` (flagged afresh, so
    an earlier approval does not cover it), both keyword lists, and a `merged` provenance
    link from the task (unique per task: IntegrityError when another writer linked it
    first)."""
    IdentityMemory.objects.filter(pk=target.pk).update(content=text, updated_at=timezone.now())
    memory_keywords_set(target.pk, keywords_clean([*memory_keywords(target.pk), *keywords]))
    memory_flags_write(memory_id=target.pk, text=text)
    MemorySourceTask.objects.create(memory=target, task=task, merged=True)


def finished_later(memory: IdentityMemory, task: Task) -> bool:
    """True when the memory's source task finished after `task` (ties: the higher task id)."""
    theirs = source_finished_at_of(memory)
    mine = task.finished_at
    if theirs is None or mine is None:
        return theirs is not None and mine is None
    if theirs != mine:
        return theirs > mine
    return (memory.source_task_id or 0) > task.pk
