"""Feedback: tasks and people say which memories they used and which misled them.

A task cites the memories it relied on (the memory tool's `memory_cite`, or a last line
`Memories used: #12, #31` in its result), and may report one that misled it
(`memory_report`: `wrong`, `outdated` or `unsafe`). A task may cite or report only memories
it was shown: those injected into its first turn and those the memory tool returned to it;
anything else is ignored without error, so an agent cannot reach memories by guessing ids.
A person reports through the API or the console any memory they can read.

Each cite or report is one `MemoryFeedback` row (once per memory, task and kind), counted
on the memory (`cite_count`, `report_count` and when last) and audited. A report holds the
memory out of injection and search (`report_hold_at`) until a project owner reviews it; a
task may report at most `AUTOMEMORY_REPORTS_PER_TASK` memories, so a prompt-injected agent
told to report everything holds that many at most.
"""

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from automemory import conf
from automemory.models import (
    FeedbackKind,
    FeedbackVia,
    MemoryFeedback,
    ReportReason,
    TaskMemoryShown,
)
from automemory.services.redactor import redact
from automemory.services.text import one_line
from controlplane.errors import DomainError
from controlplane.models import IdentityMemory, Task
from controlplane.services.audit import audit_record

logger = logging.getLogger(__name__)

# `Memories used: #12, #31` (or `none`), the result's last such line; only the result's end
# is read, so a long result costs nothing more.
CITATION_TAIL_CHARS = 4000
_CITATION_LINE = re.compile(
    r"^[ \t>*_`-]*memories[ \t]+used[ \t]*[:\uff1a][ \t]*(?P<ids>[^\n]*)$",
    re.IGNORECASE | re.MULTILINE,
)
_CITED_ID = re.compile(r"#\s?(\d{1,18})\b")


class ReportLimitReached(DomainError):
    """The task reported as many memories as it may."""

    status_code = 429


@dataclass
class CiteOutcome:
    """Which of the ids a cite named were counted now, were already counted for the task,
    or were ignored (never shown to the task, or gone)."""

    counted: list[int] = field(default_factory=list)
    already: list[int] = field(default_factory=list)
    ignored: list[int] = field(default_factory=list)


def citations_parse(result_text: str) -> list[int]:
    """The memory ids the result's last `Memories used:` line names, in order, at most
    `AUTOMEMORY_CITES_PER_TASK`; empty without such a line. Reads only the result's end."""
    tail = (result_text or "")[-CITATION_TAIL_CHARS:]
    lines = list(_CITATION_LINE.finditer(tail))
    if not lines:
        return []
    ids = [int(found) for found in _CITED_ID.findall(lines[-1].group("ids"))]
    return list(dict.fromkeys(ids))[: conf.get("CITES_PER_TASK")]


def memories_shown_record(*, task: Task, memory_ids: Iterable[int]) -> None:
    """Remember that the memory tool showed these memories to `task` (it may cite them)."""
    rows = [TaskMemoryShown(task_id=task.pk, memory_id=pk) for pk in dict.fromkeys(memory_ids)]
    if rows:
        TaskMemoryShown.objects.bulk_create(rows, ignore_conflicts=True)


def memories_shown_to(task: Task, memory_ids: Iterable[int]) -> set[int]:
    """Which of `memory_ids` were shown to `task`: injected into it, or returned to it by the
    memory tool (one query, none when all were injected)."""
    wanted = set(memory_ids)
    injected = wanted & set(task.injected_ids)
    rest = wanted - injected
    if not rest:
        return injected
    shown = TaskMemoryShown.objects.filter(task_id=task.pk, memory_id__in=rest)
    return injected | set(shown.values_list("memory_id", flat=True))


def note_clean(note: object) -> str:
    """A feedback note: redacted, on one line, cut to `AUTOMEMORY_FEEDBACK_NOTE_MAX_CHARS`."""
    if not isinstance(note, str):
        return ""
    limit = conf.get("FEEDBACK_NOTE_MAX_CHARS")
    return one_line(redact(note[: limit * 4]), limit)


@transaction.atomic
def memory_cite(
    *, task: Task, memory_ids: Iterable[int], note: str = "", via: str = FeedbackVia.MCP
) -> CiteOutcome:
    """Count `task`'s use of the memories it names that it was shown (once per task).

    The memories are locked in id order, so two cites of one task at once count once.
    """
    wanted = [pk for pk in dict.fromkeys(memory_ids) if isinstance(pk, int) and pk > 0]
    wanted = wanted[: conf.get("CITES_PER_TASK")]
    shown = memories_shown_to(task, wanted)
    locked = set(
        IdentityMemory.objects.select_for_update()
        .filter(pk__in=shown)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    already = set(
        MemoryFeedback.objects.filter(
            task_id=task.pk, kind=FeedbackKind.CITE, memory_id__in=locked
        ).values_list("memory_id", flat=True)
    )
    outcome = CiteOutcome(
        counted=[pk for pk in wanted if pk in locked and pk not in already],
        already=[pk for pk in wanted if pk in already],
        ignored=[pk for pk in wanted if pk not in locked],
    )
    if not outcome.counted:
        return outcome
    text = note_clean(note)
    MemoryFeedback.objects.bulk_create(
        [
            MemoryFeedback(
                memory_id=pk,
                task_id=task.pk,
                user_id=task.user_id,
                kind=FeedbackKind.CITE,
                note=text,
                via=via,
            )
            for pk in outcome.counted
        ]
    )
    IdentityMemory.objects.filter(pk__in=outcome.counted).update(
        cite_count=F("cite_count") + 1, last_cited_at=timezone.now()
    )
    audit_record(
        action="memory_cited",
        actor_label=f"task {task.pk}",
        target_type="task",
        target_id=task.pk,
        data={"memory_ids": outcome.counted, "ignored": outcome.ignored[:20], "via": via},
    )
    return outcome


def citations_record(*, task: Task, result_text: str) -> CiteOutcome:
    """Count the memories the result's `Memories used:` line names (the worker calls this
    once a turn completed); ids the task was not shown are ignored."""
    ids = citations_parse(result_text)
    if not ids:
        return CiteOutcome()
    return memory_cite(task=task, memory_ids=ids, via=FeedbackVia.RESULT_LINE)


def _reason_checked(reason: object) -> str:
    if reason not in ReportReason.values:
        raise DomainError(
            f"Must be one of: {', '.join(ReportReason.values)}.",
            field="reason",
        )
    return str(reason)


@transaction.atomic
def memory_report(
    *,
    memory: IdentityMemory,
    reason: str,
    note: str = "",
    user=None,
    task: Task | None = None,
    via: str = FeedbackVia.PERSON,
) -> MemoryFeedback:
    """Record that `memory` misled a task (or a person) and hold it for review.

    A task reports once per memory (again: the first report is returned), only memories it
    was shown, and at most `AUTOMEMORY_REPORTS_PER_TASK` memories (`ReportLimitReached`).
    The caller has checked that a person may read the memory (see controlplane.access).
    """
    reason = _reason_checked(reason)
    text = note_clean(note)
    locked = IdentityMemory.objects.select_for_update().filter(pk=memory.pk).first()
    if locked is None:
        raise DomainError("The memory was deleted meanwhile.")
    if task is not None:
        if not memories_shown_to(task, [memory.pk]):
            raise DomainError("This memory was not shown to the task.", field="id")
        existing = MemoryFeedback.objects.filter(
            memory_id=memory.pk, task_id=task.pk, kind=FeedbackKind.REPORT
        ).first()
        if existing is not None:
            return existing
        # The task's row is the lock of its report count: two reports of one task at once
        # (on different memories) cannot both see room for one more.
        Task.objects.select_for_update().filter(pk=task.pk).values_list("pk").first()
        made = MemoryFeedback.objects.filter(task_id=task.pk, kind=FeedbackKind.REPORT).count()
        if made >= conf.get("REPORTS_PER_TASK"):
            logger.warning(
                "task %s tried to report memory %s past its %d reports",
                task.pk,
                memory.pk,
                conf.get("REPORTS_PER_TASK"),
            )
            raise ReportLimitReached(
                f"This task has reported {made} memories, the most a task may report."
            )
    now = timezone.now()
    feedback = MemoryFeedback.objects.create(
        memory_id=memory.pk,
        task=task,
        user=user if user is not None else (task.user if task is not None else None),
        kind=FeedbackKind.REPORT,
        reason=reason,
        note=text,
        via=via,
    )
    IdentityMemory.objects.filter(pk=memory.pk).update(
        report_count=F("report_count") + 1,
        last_reported_at=now,
        report_hold_at=Coalesce(F("report_hold_at"), Value(now, output_field=DateTimeField())),
    )
    audit_record(
        action="memory_reported",
        actor=user,
        actor_label=f"task {task.pk}" if task is not None else "",
        target_type="memory",
        target_id=memory.pk,
        data={
            "project_id": locked.project_id,
            "task_id": task.pk if task is not None else None,
            "reason": reason,
            "via": via,
        },
    )
    return feedback
