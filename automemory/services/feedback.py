"""Feedback: tasks and people say which memories they used and which misled them.

A task cites the memories it relied on (the memory tool's `memory_cite`, or a last line
`Memories used: #12, #31` in its result), and may report one that misled it
(`memory_report`: `wrong`, `outdated` or `unsafe`). A task may cite or report only memories
it was shown: those injected into its first turn and those the memory tool returned to it;
anything else is ignored without error, so an agent cannot reach memories by guessing ids.
A person reports through the API or the console any memory they can read.

Each cite or report is one `MemoryFeedback` row (once per memory, task and kind), counted
in auto memory's row of the memory (`MemoryState`: `cite_count`, `report_count` and when
last) and audited. A report holds the memory out of injection and search
(`MemoryState.report_hold_at`) until a project owner reviews it; a
task may report at most `AUTOMEMORY_REPORTS_PER_TASK` memories, so a prompt-injected agent
told to report everything holds that many at most.

A person has one open report of a memory at a time (a database constraint); the owner's
approval closes it. Reporting the memory again after that is a `repeat` and needs a reason
or note the person has not given for it before. A person makes at most
`AUTOMEMORY_REPORTS_PER_PERSON_HOUR` reports of one project's memories in an hour.
"""

import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from automemory import conf
from automemory.models import (
    FeedbackKind,
    FeedbackVia,
    MemoryFeedback,
    ReportReason,
    TaskMemoryShown,
    task_injected_ids,
)
from automemory.services.memory_state import memory_state_count
from automemory.services.redactor import redact
from automemory.services.text import one_line
from controlplane.errors import DomainError
from controlplane.models import IdentityMemory, Task
from controlplane.services.audit import audit_record
from controlplane.services.memories import memory_locked

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
    """The task (or the person, this hour) reported as many memories as it may."""

    status_code = 429


REPORTED_ALREADY = (
    "You have reported this memory already; it is held until a project owner reviews it."
)
REPORT_NOT_NEW = (
    "A project owner approved this memory after your report of it; to report it again, "
    "give a reason or note you have not given for it before."
)
PERSON_REPORT_WINDOW = timedelta(hours=1)


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
    injected = wanted & set(task_injected_ids(task))
    rest = wanted - injected
    if not rest:
        return injected
    shown = TaskMemoryShown.objects.filter(task_id=task.pk, memory_id__in=rest)
    return injected | set(shown.values_list("memory_id", flat=True))


def note_clean(note: object) -> str:
    """A feedback note: redacted, then on one line and cut to
    `AUTOMEMORY_FEEDBACK_NOTE_MAX_CHARS`.

    The whole note is redacted before anything is cut (a request body is bounded by
    `DATA_UPLOAD_MAX_MEMORY_SIZE`): a cut made first could leave the start of a secret too
    short for its rule to recognise, and collapsing white space would bring it forward."""
    if not isinstance(note, str):
        return ""
    return one_line(redact(note), conf.get("FEEDBACK_NOTE_MAX_CHARS"))


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
    memory_state_count(memory_ids=outcome.counted, event="cited", now=timezone.now())
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


def _person_report_checked(*, user, memory: IdentityMemory, reason: str, note: str, now) -> bool:
    """Whether `user`'s report of `memory` (locked) is a repeat; a `DomainError` when they
    have an open report of it, or when it repeats one an owner already reviewed, and
    `ReportLimitReached` past their reports of the project this hour."""
    earlier = list(
        MemoryFeedback.objects.filter(
            memory_id=memory.pk, user_id=user.pk, kind=FeedbackKind.REPORT, task__isnull=True
        ).values_list("reason", "note", "closed_at")
    )
    if any(closed_at is None for _, _, closed_at in earlier):
        raise DomainError(REPORTED_ALREADY)
    if (reason, note) in {(r, n) for r, n, _ in earlier}:
        raise DomainError(REPORT_NOT_NEW, field="note")
    # The person's row is the lock of their hourly count, as the task's row is of its.
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk").first()
    since = now - PERSON_REPORT_WINDOW
    made = list(
        MemoryFeedback.objects.filter(
            user_id=user.pk,
            kind=FeedbackKind.REPORT,
            task__isnull=True,
            created_at__gte=since,
            memory__project_id=memory.project_id,
        )
        .order_by("created_at")
        .values_list("created_at", flat=True)
    )
    most = conf.get("REPORTS_PER_PERSON_HOUR")
    if len(made) >= most:
        wait = math.ceil((made[0] - since).total_seconds() / 60) or 1
        logger.warning(
            "user %s tried to report memory %s past %d an hour", user.pk, memory.pk, most
        )
        raise ReportLimitReached(
            f"You have made {len(made)} reports of this project's memories in the last hour, "
            f"the most one person may; try again in {wait} minute{'s' if wait != 1 else ''}."
        )
    return bool(earlier)


def _task_report_checked(*, task: Task, memory: IdentityMemory) -> MemoryFeedback | None:
    """`task`'s earlier report of `memory`, if any; a `DomainError` when the task was not
    shown it, `ReportLimitReached` past its reports."""
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
    return None


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
    A person has one open report per memory (another while it is open: `DomainError`, 400,
    nothing counted); after an owner approved the memory, a new report of it is a `repeat`
    and needs a reason or note they have not given for it (else 400); at most
    `AUTOMEMORY_REPORTS_PER_PERSON_HOUR` reports of the project's memories an hour
    (`ReportLimitReached`, 429). The caller has checked that a person may read the memory
    (see controlplane.access). The memory is locked first: 404 when it was deleted.
    """
    reason = _reason_checked(reason)
    text = note_clean(note)
    locked = memory_locked(memory)
    now = timezone.now()
    repeat = False
    if task is not None:
        existing = _task_report_checked(task=task, memory=locked)
        if existing is not None:
            return existing
    elif user is not None:
        repeat = _person_report_checked(user=user, memory=locked, reason=reason, note=text, now=now)
    try:
        with transaction.atomic():
            feedback = MemoryFeedback.objects.create(
                memory_id=memory.pk,
                task=task,
                user=user if user is not None else (task.user if task is not None else None),
                kind=FeedbackKind.REPORT,
                reason=reason,
                note=text,
                via=via,
                repeat=repeat,
            )
    except IntegrityError:
        # The open-report constraint: the row lock makes this unreachable, the database
        # still says no.
        raise DomainError(REPORTED_ALREADY) from None
    memory_state_count(memory_ids=[memory.pk], event="reported", now=now, hold=True)
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
            "repeat": repeat,
        },
    )
    return feedback


def reports_close(*, memory: IdentityMemory, user=None) -> int:
    """Close the open reports of `memory` (an owner approved it); how many. Registered as
    the host's approval hook, so it runs inside the approval's transaction."""
    return MemoryFeedback.objects.filter(
        memory_id=memory.pk, kind=FeedbackKind.REPORT, closed_at__isnull=True
    ).update(closed_at=timezone.now())
