"""Extraction: completed, idle tasks become project-level memories.

`process_auto_memories()` runs one sweep. The worker calls it at the end of every round
(`user=None`: everyone's tasks); the run endpoint and `manage.py run_auto_memory` call it for
one user. Each candidate goes through the gates in order (generate switch, idle, duration and
length, external context, quota); a task that fails one is logged as skipped with the reason
and tried again later. A task that passes becomes one project memory; when another memory of
the same project has the same goal, the one whose task finished later stays active. A memory
whose task shows external context when it is completed again (a later turn's MCP call or web
search) is retracted.

Cost: both sweeps read only what may have a new answer (tasks completed or updated since a
cursor, and the retry set: transient skips and errors whose `retry_after` has come, and skips
marked for a recheck after a settings or flags change; the per-user sweep takes its user's
retry set whatever the `retry_after`, and when forced its user's skips), so they grow with
pending work, not with history. Lookups are batched: the read side runs a fixed number of
queries whatever the number of candidates.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import (
    BigIntegerField,
    BooleanField,
    Case,
    DateTimeField,
    F,
    Min,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.db.models.sql import Query
from django.utils import timezone

from automemory import conf, metrics
from automemory.models import (
    MAX_ERROR_ATTEMPTS,
    RETRY_CONDITION,
    SKIPPED_CONDITION,
    STABLE_REASONS,
    TRANSIENT_REASONS,
    AutoMemoryLog,
    AutoMemorySettings,
    Outcome,
    Reason,
    SweepState,
    TaskAutoMemoryFlags,
)
from automemory.services.claims import (
    KeptDraft,
    SweepClaims,
    extraction_claims_keep,
    extraction_claims_keep_draft,
    extraction_claims_release,
    extraction_claims_take,
)
from automemory.services.consolidation import (
    Action,
    Decision,
    WriteResult,
    consolidation_retirements_undo,
    memory_consolidation_decide,
    memory_decision_apply,
)
from automemory.services.content import (
    MemoryDraft,
    NoDurableSignal,
    goal_key,
    render_memory_content,
)
from automemory.services.llm import (
    MemoryBudgetExhausted,
    ModelCallCapReached,
    ModelOutputInvalid,
    ModelUnavailable,
    SweepModelCalls,
)
from automemory.services.model_extraction import model_memory_draft
from automemory.services.preferences import effective_switch
from automemory.services.provenance import (
    PrivateTexts,
    injected_text_removed,
    matching_fingerprints,
    private_texts_for,
)
from automemory.services.redactor import redact
from controlplane.models import (
    IdentityMemory,
    MemorySource,
    MemorySourceTask,
    MemoryStatus,
    Task,
    TaskEvent,
    TaskFollowup,
    TaskStatus,
)
from controlplane.services import quota as quota_service
from controlplane.services.audit import audit_record

logger = logging.getLogger(__name__)

GLOBAL_SWEEP = "global"
# Transactions that committed late may carry an `updated_at` a little behind the cursor;
# the cursor never advances past `now - this`, so such tasks are still seen next round.
CURSOR_SAFETY_MARGIN = timedelta(seconds=30)
ERROR_BACKOFF_BASE = timedelta(minutes=1)
# Executor events that bring in context from outside the task (`TaskEvent.kind`).
EXTERNAL_EVENT_KINDS = ("mcp_tool_call", "web_search")
# How much of a search query or a server/tool name a log detail quotes.
DETAIL_QUOTE_CHARS = 60
# Every gate's reason code, reported with a count (0 included) in each summary.
SKIP_REASONS = (
    Reason.GENERATE_DISABLED,
    Reason.NOT_IDLE,
    Reason.MISSING_TIMESTAMPS,
    Reason.DURATION_TOO_SHORT,
    Reason.RESULT_TOO_SHORT,
    Reason.EXTERNAL_CONTEXT,
    Reason.QUOTA_LOW,
    Reason.QUOTA_CHECK_FAILED,
    Reason.PRIVATE_CONTENT,
    Reason.ALREADY_KNOWN,
    Reason.NO_DURABLE_SIGNAL,
    Reason.MODEL_UNAVAILABLE,
    Reason.MEMORY_BUDGET_EXHAUSTED,
)
# How an extraction went into the memories, each counted (0 included) in `extractions`;
# their sum is `extracted`, and the log's reason of each extracted task is one of them.
EXTRACTION_REASONS = (
    Reason.NEW,
    Reason.SUPERSEDED,
    Reason.SUPERSEDED_ON_WRITE,
    Reason.MERGED,
)


@dataclass
class SweepSummary:
    """What one sweep did: tasks examined, memories written, superseded and retracted, skips.

    `extracted` counts the tasks logged `extracted` by this sweep, `extractions` the same
    tasks by log reason; `superseded` counts memories this sweep made superseded (an older
    one replaced, one superseded as soon as it was written, those a consolidation replaced).
    """

    scanned: int = 0
    extracted: int = 0
    extractions: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((reason.value for reason in EXTRACTION_REASONS), 0)
    )
    superseded: int = 0
    retracted: int = 0
    skipped: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((reason.value for reason in SKIP_REASONS), 0)
    )
    errors: int = 0
    forced: bool = False
    # Model calls made (extraction and consolidation, repairs included), and the tasks left
    # untouched for the next sweep because the per-sweep call cap was reached.
    model_calls: int = 0
    deferred: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "extracted": self.extracted,
            "extractions": dict(self.extractions),
            "superseded": self.superseded,
            "retracted": self.retracted,
            "skipped": dict(self.skipped),
            "errors": self.errors,
            "model_calls": self.model_calls,
            "deferred": self.deferred,
            "forced": self.forced,
        }


@dataclass
class _Verdict:
    outcome: str
    reason: str
    detail: str = ""
    memory_id: int | None = None
    retry_after: datetime | None = None
    # Another sweep wrote the memory: its log row stands (this one only fills in for it).
    written_elsewhere: bool = False


def process_auto_memories(
    *, user=None, force: bool = False, now: datetime | None = None
) -> SweepSummary:
    """Run one extraction sweep over completed tasks, of one user or of everyone.

    `force` skips the idle, duration and length gates (never the switch, external-context or
    quota gates). Returns the summary; never raises for one task's failure (it is logged).
    """
    now = now or timezone.now()
    summary = SweepSummary(forced=force)
    batch_size = conf.get("SWEEP_BATCH_SIZE")
    if user is None:
        tasks, advance_cursor = _global_candidates(now=now, force=force, limit=batch_size)
    else:
        tasks, advance_cursor = _user_candidates(user=user, force=force, limit=batch_size * 2)
    deferred: list[Task] = []
    if tasks:
        deferred = _process_batch(tasks, now=now, force=force, summary=summary)
    advance_cursor(hold=_cursor_hold(deferred))
    metrics.sweep_observe(summary=summary, scope="all" if user is None else "user")
    if summary.scanned:
        logger.info(
            "auto memory sweep%s: scanned %d, extracted %d, superseded %d, retracted %d, "
            "skipped %s, errors %d, model calls %d, left for the next sweep %d",
            f" for user {user.pk}" if user is not None else "",
            summary.scanned,
            summary.extracted,
            summary.superseded,
            summary.retracted,
            {k: v for k, v in summary.skipped.items() if v},
            summary.errors,
            summary.model_calls,
            summary.deferred,
        )
    return summary


def _cursor_hold(deferred: list[Task]) -> tuple[datetime, int] | None:
    """The point the sweep's cursor may not pass: just before the first task of the fresh
    read that was left for the next sweep (the model call cap), so the next read sees it."""
    changed = [task for task in deferred if getattr(task, "read_as_changed", False)]
    if not changed:
        return None
    first = min(changed, key=lambda task: (task.updated_at, task.pk))
    return first.updated_at, first.pk - 1


# --- Candidate selection ---------------------------------------------------------------------


def _log_of(task: Task) -> AutoMemoryLog | None:
    try:
        return task.auto_memory_log
    except AutoMemoryLog.DoesNotExist:
        return None


def _may_have_new_answer(task: Task, log: AutoMemoryLog | None, *, changed: bool) -> bool:
    """Whether `task` (its log row `log`) goes to the gates, or to a retraction check.

    Never for a task extracted (even if its memory was deleted since) or retracted. For a
    task read because it `changed` since the cursor: not when its transient skip or error is
    the retry set's (with its back-off), nor when it is a stable skip that holds (no change
    since it was tried, no recheck asked); an extracted task that changed since is kept, with
    `log_outcome` "extracted", for a retraction check only.
    """
    task.log_outcome = log.outcome if log is not None else None
    if log is None:
        return True
    if log.outcome == Outcome.EXTRACTED:
        return changed and log.retracted_at is None and log.last_attempt_at < task.updated_at
    if log.retracted_at is not None:
        return False
    if not changed:
        return True
    if log.outcome == Outcome.ERROR or log.reason in TRANSIENT_REASONS:
        return False
    unchanged = log.last_attempt_at >= task.updated_at
    return not (log.reason in STABLE_REASONS and not log.recheck and unchanged)


def _examine(task_ids, *, changed: bool) -> list[Task]:
    """The completed tasks among `task_ids` that may have a new answer, oldest change first.

    Read by primary key with the log row joined, and one read of which have an auto memory,
    so that every database does index lookups whatever the size of the history (an anti-join
    inside an OR lets a planner scan the whole log instead).
    """
    if not task_ids:
        return []
    tasks = (
        Task.objects.filter(pk__in=task_ids, status=TaskStatus.COMPLETED)
        .select_related("auto_memory_log")
        .order_by("updated_at", "id")
    )
    with_memory = set(
        IdentityMemory.objects.filter(
            source=MemorySource.AUTO, source_task_id__in=task_ids
        ).values_list("source_task_id", flat=True)
    )
    kept = []
    for task in tasks:
        log = _log_of(task)
        extracted = log is not None and log.outcome == Outcome.EXTRACTED
        if task.pk in with_memory and not extracted:
            continue
        if _may_have_new_answer(task, log, changed=changed):
            kept.append(task)
    return kept


def _fresh(
    completed: QuerySet[Task], *, after: tuple[datetime, int] | None, limit: int
) -> tuple[list[Task], tuple[datetime, int] | None]:
    """Completed tasks changed since `after` that may have a new answer, in (updated_at, id) order.

    The completed tasks changed since `after` (a range scan of the `(.., updated_at, id)`
    index, at most `limit`), then those of them that may have a new answer. Also returns
    where the read stopped when it took `limit` changed tasks (None: it read every change).
    """
    changed = completed
    if after is not None:
        updated_at, task_id = after
        # The first term bounds the index scan on every database.
        changed = changed.filter(
            Q(updated_at__gte=updated_at)
            & (Q(updated_at__gt=updated_at) | Q(updated_at=updated_at, id__gt=task_id))
        )
    points = list(changed.order_by("updated_at", "id").values_list("updated_at", "id")[:limit])
    fresh = _examine([task_id for _, task_id in points], changed=True)
    for task in fresh:
        task.read_as_changed = True
    return fresh, points[-1] if len(points) >= limit else None


def _cursor(state: SweepState | None) -> tuple[datetime, int] | None:
    if state is None or state.cursor_updated_at is None:
        return None
    return state.cursor_updated_at, state.cursor_task_id


def _as_index_spells_it(model, condition: Q) -> RawSQL:
    """`condition` with its values written out, as in the partial index built from it.

    SQLite uses a partial index only when the query repeats the index's predicate with the
    same constants (a bound parameter does not match), so the reads that rely on one say it
    this way. For single-table queries on `model`: the column names are unqualified.
    """
    query = Query(model=model, alias_cols=False)
    sql, params = query.build_where(condition).as_sql(
        query.get_compiler(connection=connection), connection
    )
    editor = connection.SchemaEditorClass(connection)
    literal = sql % tuple(editor.quote_value(param) for param in params)
    return RawSQL(literal, [], output_field=BooleanField())


def _user_sweep_name(user_id: int) -> str:
    return f"user:{user_id}"


def _cursor_advancer(name: str, *, read_at: datetime, stopped_at: tuple[datetime, int] | None):
    """Move the sweep state `name` past what the fresh read covered; stamp `last_sweep_at`.

    The read covered every task up to `read_at - margin` (those it did not return were
    extracted, unchanged stable skips or the retry set's: a change bumps them past the
    cursor), or, when it stopped at its limit, up to `stopped_at`. The cursor moves over both
    kinds, so it keeps up with the clock even when nothing is returned, and the next read
    starts where work may be. It never passes `read_at - margin`: a transaction that commits
    late with an older `updated_at` is still read next round, nor `hold` (tasks of the fresh
    read left for the next sweep).
    """

    def advance_cursor(hold: tuple[datetime, int] | None = None) -> None:
        wall = timezone.now()
        point = (read_at - CURSOR_SAFETY_MARGIN, 0)
        if stopped_at is not None:
            point = min(point, stopped_at)
        if hold is not None:
            # Tasks left for the next sweep (the model call cap) are read again.
            point = min(point, hold)
        updated_at, task_id = point
        if name != GLOBAL_SWEEP:
            # One statement whether the user's row exists or not. Two sweeps of one user at
            # once may move it back a little, which only means reading a little more.
            state = SweepState(
                name=name, cursor_updated_at=updated_at, cursor_task_id=task_id, last_sweep_at=wall
            )
            SweepState.objects.bulk_create(
                [state],
                update_conflicts=True,
                unique_fields=["name"],
                update_fields=["cursor_updated_at", "cursor_task_id", "last_sweep_at"],
            )
            return
        behind = (
            Q(cursor_updated_at__isnull=True)
            | Q(cursor_updated_at__lt=updated_at)
            | Q(cursor_updated_at=updated_at, cursor_task_id__lt=task_id)
        )
        # Another worker's sweep may be further already: never move the cursor back.
        SweepState.objects.filter(name=name).update(
            cursor_updated_at=Case(
                When(behind, then=Value(updated_at, output_field=DateTimeField())),
                default=F("cursor_updated_at"),
            ),
            cursor_task_id=Case(
                When(behind, then=Value(task_id, output_field=BigIntegerField())),
                default=F("cursor_task_id"),
            ),
            last_sweep_at=wall,
        )

    return advance_cursor


def _user_candidates(*, user, force: bool, limit: int):
    """One user's tasks that may have a new answer, and a cursor-advancer.

    Like the global sweep, bounded sources rather than the user's whole history: the user's
    completed tasks changed since a point (the later of the global cursor and the user's own:
    both sweeps have seen everything before it), the user's retry set whatever its
    `retry_after` (so the caller hears `not_idle` now), and when forced the user's skips.
    """
    name = _user_sweep_name(user.pk)
    states = {row.name: row for row in SweepState.objects.filter(name__in=[GLOBAL_SWEEP, name])}
    points = [_cursor(states.get(GLOBAL_SWEEP)), _cursor(states.get(name))]
    after = max((point for point in points if point is not None), default=None)
    completed = Task.objects.filter(user=user, status=TaskStatus.COMPLETED)
    read_at = timezone.now()
    fresh_tasks, stopped_at = _fresh(completed, after=after, limit=limit)

    logs = AutoMemoryLog.objects.filter(user=user, retracted_at__isnull=True)
    sources = [logs.filter(_as_index_spells_it(AutoMemoryLog, RETRY_CONDITION))]
    if force:
        sources.append(logs.filter(_as_index_spells_it(AutoMemoryLog, SKIPPED_CONDITION)))
    again_ids: set[int] = set()
    for source in sources:
        again_ids |= set(
            source.order_by("last_attempt_at").values_list("task_id", flat=True)[:limit]
        )
    again_ids -= {task.pk for task in fresh_tasks}
    again = _examine(sorted(again_ids), changed=False)
    return fresh_tasks + again, _cursor_advancer(name, read_at=read_at, stopped_at=stopped_at)


def _global_candidates(*, now: datetime, force: bool, limit: int):
    """Tasks that may have a new answer since the last global round, and a cursor-advancer.

    Two bounded sources: completed tasks changed since the cursor, and the retry set
    (transient skips and errors under the retry cap whose `retry_after` has come, stable
    skips marked for a recheck).
    """
    state, _ = SweepState.objects.get_or_create(name=GLOBAL_SWEEP)
    completed = Task.objects.filter(status=TaskStatus.COMPLETED)
    read_at = timezone.now()
    fresh_tasks, stopped_at = _fresh(completed, after=_cursor(state), limit=limit)

    logs = AutoMemoryLog.objects.filter(retracted_at__isnull=True)
    if force:
        retry = logs.exclude(outcome=Outcome.EXTRACTED)
    else:
        retry = logs.filter(_as_index_spells_it(AutoMemoryLog, RETRY_CONDITION)).exclude(
            outcome=Outcome.ERROR, attempts__gte=MAX_ERROR_ATTEMPTS
        )
        retry = retry.filter(
            Q(recheck=True) | Q(retry_after__isnull=True) | Q(retry_after__lte=now)
        )
    retry_ids = set(retry.order_by("last_attempt_at").values_list("task_id", flat=True)[:limit]) - {
        task.pk for task in fresh_tasks
    }
    retry_tasks = _examine(sorted(retry_ids), changed=False)
    advance_cursor = _cursor_advancer(GLOBAL_SWEEP, read_at=read_at, stopped_at=stopped_at)
    return fresh_tasks + retry_tasks, advance_cursor


# --- Gates -----------------------------------------------------------------------------------


def _process_batch(
    batch: list[Task], *, now: datetime, force: bool, summary: SweepSummary
) -> list[Task]:
    """Take `batch` through the gates and extraction; log each task. Returns the tasks left
    untouched (no log row written) because the sweep's model call cap was reached."""
    task_ids = [task.pk for task in batch]
    user_ids = {task.user_id for task in batch}
    settings_by_user = {
        row.user_id: row for row in AutoMemorySettings.objects.filter(user_id__in=user_ids)
    }
    flags_by_task = {
        row.task_id: row for row in TaskAutoMemoryFlags.objects.filter(task_id__in=task_ids)
    }
    logs_by_task = {row.task_id: row for row in AutoMemoryLog.objects.filter(task_id__in=task_ids)}
    messaged = set(
        TaskFollowup.objects.filter(task_id__in=task_ids)
        .order_by()
        .values_list("task_id", flat=True)
        .distinct()
    )
    events_by_task = _external_events(task_ids)

    # Tasks extracted earlier and completed again are only checked for external context.
    rechecked = [task for task in batch if getattr(task, "log_outcome", None) == Outcome.EXTRACTED]
    tasks = [task for task in batch if getattr(task, "log_outcome", None) != Outcome.EXTRACTED]
    for task in rechecked:
        prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)
        if not prefs.disable_on_external_context:
            continue
        seen = _external_context_seen(
            task,
            prefs=prefs,
            received_message=task.pk in messaged,
            events=events_by_task.get(task.pk, ()),
        )
        if seen is not None and _retract(task, seen=seen, now=now, force=force):
            summary.retracted += 1
            summary.scanned += 1

    verdicts: dict[int, _Verdict] = {}
    awaiting_quota: list[Task] = []
    extractable: list[Task] = []
    for task in tasks:
        prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)
        verdict = _early_gates(
            task,
            prefs=prefs,
            flags=flags_by_task.get(task.pk),
            received_message=task.pk in messaged,
            events=events_by_task.get(task.pk, ()),
            now=now,
            force=force,
        )
        if verdict is None:
            awaiting_quota.append(task)
        else:
            verdicts[task.pk] = verdict

    if awaiting_quota:
        statuses = _quota_statuses({task.user_id for task in awaiting_quota}, now=now)
        for task in awaiting_quota:
            prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)
            status = statuses.get(task.user_id)
            if status is None:
                verdicts[task.pk] = _Verdict(
                    Outcome.SKIPPED,
                    Reason.QUOTA_CHECK_FAILED,
                    "quota could not be read",
                    retry_after=now + timedelta(seconds=conf.get("QUOTA_CHECK_RETRY_SECONDS")),
                )
            elif status.remaining_percent < prefs.min_rate_limit_remaining_percent:
                verdicts[task.pk] = _Verdict(
                    Outcome.SKIPPED,
                    Reason.QUOTA_LOW,
                    f"{status.remaining_percent_display}% of the monthly quota left, "
                    f"below {prefs.min_rate_limit_remaining_percent}%",
                    retry_after=now + timedelta(seconds=conf.get("QUOTA_LOW_RETRY_SECONDS")),
                )
            else:
                extractable.append(task)
    claims = SweepClaims()
    try:
        if awaiting_quota:
            calls = SweepModelCalls()
            _extract_all(
                extractable,
                verdicts=verdicts,
                summary=summary,
                settings_by_user=settings_by_user,
                calls=calls,
                claims=claims,
            )
            summary.model_calls += calls.used
        # Tasks another sweep answered since this one read them are that sweep's to log;
        # the rest without a verdict (call cap, claimed elsewhere) wait for the next sweep.
        deferred = [
            task for task in tasks if task.pk not in verdicts and task.pk not in claims.answered
        ]
        tasks = [task for task in tasks if task.pk in verdicts]
        summary.deferred += len(deferred)
        _write_logs(tasks, verdicts=verdicts, logs_by_task=logs_by_task, now=now, force=force)
    finally:
        # Whatever happened, once the log rows are written (or could not be).
        extraction_claims_release(claims)
    summary.scanned += len(tasks)
    for verdict in verdicts.values():
        if verdict.outcome == Outcome.SKIPPED:
            reason = str(verdict.reason)
            summary.skipped[reason] = summary.skipped.get(reason, 0) + 1
        elif verdict.outcome == Outcome.ERROR:
            summary.errors += 1
    metrics.extractions_observe(
        verdicts=[(v.outcome, v.reason) for v in verdicts.values() if not v.written_elsewhere]
    )
    return deferred


def _early_gates(
    task: Task,
    *,
    prefs: AutoMemorySettings,
    flags: TaskAutoMemoryFlags | None,
    received_message: bool,
    events: Iterable["_ExternalEvent"],
    now: datetime,
    force: bool,
) -> _Verdict | None:
    """Gates 1 to 4 in SPEC order; None when the task may go on to the quota gate."""
    skip = Outcome.SKIPPED
    flag = flags.generate_memories if flags is not None else None
    if not effective_switch(flag, prefs.generate_memories):
        source = "task flag" if flag is not None else "user setting"
        return _Verdict(skip, Reason.GENERATE_DISABLED, f"generate_memories off ({source})")
    if not force:
        if task.finished_at is None:
            return _Verdict(skip, Reason.MISSING_TIMESTAMPS, "finished_at is not set")
        idle = (now - task.finished_at).total_seconds()
        if idle < prefs.idle_seconds:
            return _Verdict(
                skip,
                Reason.NOT_IDLE,
                f"idle {int(idle)}s of the {prefs.idle_seconds}s needed",
                retry_after=task.finished_at + timedelta(seconds=prefs.idle_seconds),
            )
        if task.started_at is None:
            return _Verdict(skip, Reason.MISSING_TIMESTAMPS, "started_at is not set")
        duration = (task.finished_at - task.started_at).total_seconds()
        if duration < prefs.min_duration_seconds:
            return _Verdict(
                skip,
                Reason.DURATION_TOO_SHORT,
                f"ran {duration:.0f}s, under {prefs.min_duration_seconds}s",
            )
        length = len(task.result_text or "")
        if length < prefs.min_result_chars:
            return _Verdict(
                skip,
                Reason.RESULT_TOO_SHORT,
                f"result has {length} characters, under {prefs.min_result_chars}",
            )
    if prefs.disable_on_external_context:
        seen = _external_context_seen(
            task, prefs=prefs, received_message=received_message, events=events
        )
        if seen is not None:
            return _Verdict(skip, Reason.EXTERNAL_CONTEXT, seen)
    return None


@dataclass(frozen=True)
class _ExternalEvent:
    kind: str
    server: str | None
    tool: str | None
    search_query: str | None


def _external_events(task_ids: list[int]) -> dict[int, list[_ExternalEvent]]:
    """The MCP tool calls and web searches recorded in the tasks' runs, first seen first.

    One query for the batch (the `(task, kind)` index on events), reading only the names
    and queries out of each event's data, one row per distinct call.
    """
    rows = (
        TaskEvent.objects.filter(task_id__in=task_ids, kind__in=EXTERNAL_EVENT_KINDS)
        .annotate(
            server=KT("data__server"),
            tool=KT("data__tool"),
            search_query=Coalesce(KT("data__query"), KT("data__action__query")),
        )
        .values("task_id", "kind", "server", "tool", "search_query")
        .annotate(first_id=Min("id"))
        .order_by("first_id")
    )
    events: dict[int, list[_ExternalEvent]] = {}
    for row in rows:
        events.setdefault(row["task_id"], []).append(
            _ExternalEvent(row["kind"], row["server"], row["tool"], row["search_query"])
        )
    return events


def _external_context_seen(
    task: Task,
    *,
    prefs: AutoMemorySettings,
    received_message: bool,
    events: Iterable["_ExternalEvent"],
) -> str | None:
    """What external context the task saw, as a short redacted phrase; None when none."""
    if received_message:
        return "received an inter-task message"
    if task.parent_task_id is not None:
        return "subtask of a coordinator task"
    listed = prefs.internal_mcp_servers if isinstance(prefs.internal_mcp_servers, list) else []
    internal = {name for name in listed if isinstance(name, str)}
    external = [
        event for event in events if event.kind != "mcp_tool_call" or event.server not in internal
    ]
    if not external:
        return None
    first = external[0]
    if first.kind == "mcp_tool_call":
        seen = f"MCP call {_quoted(first.server)}/{_quoted(first.tool)}"
    else:
        seen = f"web search '{_quoted(first.search_query)}'"
    if len(external) > 1:
        seen += f" (and {len(external) - 1} more external call{'s' if len(external) > 2 else ''})"
    return seen


def _quoted(text: str | None) -> str:
    """A redacted, single-line, short excerpt of event text for a log detail."""
    if not text:
        return "?"
    text = " ".join(redact(text[: DETAIL_QUOTE_CHARS * 20]).split())
    return text if len(text) <= DETAIL_QUOTE_CHARS else text[: DETAIL_QUOTE_CHARS - 3] + "..."


def _quota_statuses(user_ids: set[int], *, now: datetime) -> dict[int, Any]:
    """Quota per user; an empty answer when it cannot be read (the gate then fails closed)."""
    try:
        return quota_service.quota_statuses_get(user_ids=sorted(user_ids), now=now)
    except Exception:
        logger.warning(
            "auto memory: quota could not be read for users %s; skipping their tasks",
            sorted(user_ids),
            exc_info=True,
        )
        return {}


# --- Writing memories --------------------------------------------------------------------------


class _AlreadyExtracted(Exception):
    """Another sweep wrote this task's memory first (or merged the task into a memory)."""

    def __init__(self, *, memory_id: int | None, reason: str):
        super().__init__(f"already extracted into memory {memory_id}")
        self.memory_id = memory_id
        self.reason = reason


class _PrivateContent(Exception):
    """The memory would hold a user-level memory's text (the message never quotes it)."""


def _extract_all(
    tasks: list[Task],
    *,
    verdicts: dict[int, _Verdict],
    summary: SweepSummary,
    settings_by_user: dict[int, AutoMemorySettings] | None = None,
    calls: SweepModelCalls | None = None,
    claims: SweepClaims | None = None,
):
    """Write each task's memory, or say in `verdicts` why not.

    A task whose model call would pass the sweep's cap gets no verdict: it is left, untouched
    and unlogged, for the next sweep. So is a task that will call a model and that another
    sweep holds a claim on (`claims`); one that another sweep answered since this sweep read
    it goes to `claims.answered`, also without a verdict (that sweep's log row stands).
    """
    private_by_task = private_texts_for(tasks)
    settings_by_user = settings_by_user or {}
    calls = calls if calls is not None else SweepModelCalls()
    claims = claims if claims is not None else SweepClaims()

    def prefs_of(task: Task) -> AutoMemorySettings:
        return settings_by_user.get(task.user_id) or AutoMemorySettings(user_id=task.user_id)

    _claim_ahead(tasks, prefs_of=prefs_of, calls=calls, claims=claims)
    for task in tasks:
        private = private_by_task.get(task.pk) or PrivateTexts()
        prefs = prefs_of(task)
        steps = _model_steps(prefs)
        if calls.used + steps > calls.limit:
            # Its calls may not all fit: an extraction paid for now and a consolidation
            # refused would be paid again next sweep. Left whole for the next sweep.
            continue
        if steps and not _claimed(task, claims=claims):
            continue
        try:
            _check_verifiable(private)
            draft, paid = _content_step(task, prefs=prefs, calls=calls, claims=claims)
            try:
                written = _extract_one(task, private=private, draft=draft, prefs=prefs, calls=calls)
            except (
                ModelCallCapReached,
                ModelUnavailable,
                MemoryBudgetExhausted,
                ModelOutputInvalid,
            ):
                # The consolidation step failed; the task waits. Its paid extraction is
                # kept for the retry, so that is not paid for again.
                if paid:
                    extraction_claims_keep_draft(
                        claims, task.pk, KeptDraft(draft.content, draft.keywords, task.updated_at)
                    )
                raise
        except ModelCallCapReached:
            continue
        except NoDurableSignal as exc:
            detail = injected_text_removed(str(exc), fingerprints=private.fingerprints)[:1000]
            verdicts[task.pk] = _Verdict(Outcome.SKIPPED, Reason.NO_DURABLE_SIGNAL, detail)
            continue
        except ModelUnavailable as exc:
            logger.warning("auto memory: task %s waits, memory model unavailable: %s", task.pk, exc)
            verdicts[task.pk] = _Verdict(Outcome.SKIPPED, Reason.MODEL_UNAVAILABLE, str(exc))
            continue
        except MemoryBudgetExhausted as exc:
            verdicts[task.pk] = _Verdict(
                Outcome.SKIPPED,
                Reason.MEMORY_BUDGET_EXHAUSTED,
                str(exc),
                retry_after=exc.retry_after,
            )
            continue
        except ModelOutputInvalid as exc:
            logger.warning("auto memory: task %s: %s", task.pk, exc)
            # The message names what is wrong and the answer's size, never its text.
            verdicts[task.pk] = _Verdict(Outcome.ERROR, Reason.MODEL_OUTPUT_INVALID, str(exc))
            continue
        except _PrivateContent as exc:
            verdicts[task.pk] = _Verdict(Outcome.SKIPPED, Reason.PRIVATE_CONTENT, str(exc))
            continue
        except _AlreadyExtracted as exc:
            # Another sweep wrote (or merged) this task's memory first; its log row says how.
            verdicts[task.pk] = _Verdict(
                Outcome.EXTRACTED, exc.reason, "", exc.memory_id, written_elsewhere=True
            )
            continue
        except Exception as exc:
            logger.exception("auto memory: extracting task %s failed", task.pk)
            detail = redact(f"{type(exc).__name__}: {exc}")
            detail = injected_text_removed(detail, fingerprints=private.fingerprints)[:1000]
            verdicts[task.pk] = _Verdict(Outcome.ERROR, Reason.ERROR, detail)
            continue
        if written.outcome == Outcome.EXTRACTED:
            summary.extracted += 1
            summary.extractions[str(written.reason)] += 1
            summary.superseded += written.superseded_count
        detail = "; ".join(part for part in (draft.note, written.detail) if part)
        verdicts[task.pk] = _Verdict(written.outcome, written.reason, detail, written.memory_id)


def _claim_ahead(tasks: list[Task], *, prefs_of, calls: SweepModelCalls, claims: SweepClaims):
    """Claim, in one go, the tasks that will call a model and that fit under the sweep's
    call cap (a task the estimate leaves out is claimed on its own if its turn comes)."""
    planned, room = [], calls.limit - calls.used
    for task in tasks:
        steps = _model_steps(prefs_of(task))
        if not steps:
            continue
        if steps > room:
            break
        planned.append(task)
        room -= steps
    _claims_take(planned, claims=claims)


def _claimed(task: Task, *, claims: SweepClaims) -> bool:
    """Whether this sweep holds `task`'s claim and may call the model for it now."""
    if task.pk in claims.refused or task.pk in claims.answered:
        return False
    if task.pk not in claims.held:
        _claims_take([task], claims=claims)
    return task.pk in extraction_claims_keep(claims)


def _claims_take(tasks: list[Task], *, claims: SweepClaims) -> None:
    """Claim `tasks`, then set aside those another sweep answered after this one read them
    (it took the claim, logged the task and let go before this sweep's claim): paying for
    them again is what the claim is for."""
    taken = extraction_claims_take(claims, [task.pk for task in tasks])
    if not taken:
        return
    latest = {
        task_id: (attempts, last_attempt_at, outcome)
        for task_id, attempts, last_attempt_at, outcome in AutoMemoryLog.objects.filter(
            task_id__in=taken
        ).values_list("task_id", "attempts", "last_attempt_at", "outcome")
    }
    # A task that reaches extraction has no memory and no `extracted` log row (those go to
    # the retraction check): either now means another sweep wrote its memory meanwhile.
    linked = set(
        MemorySourceTask.objects.filter(task_id__in=taken).values_list("task_id", flat=True)
    )
    for task in tasks:
        if task.pk not in taken:
            continue
        read = _log_of(task)
        seen = (read.attempts, read.last_attempt_at, read.outcome) if read is not None else None
        now_logged = latest.get(task.pk)
        if (
            task.pk in linked
            or now_logged != seen
            or (now_logged is not None and now_logged[2] == Outcome.EXTRACTED)
        ):
            claims.answered.add(task.pk)


def _content_step(
    task: Task, *, prefs: AutoMemorySettings, calls: SweepModelCalls, claims: SweepClaims
) -> tuple[MemoryDraft, bool]:
    """The task's draft (`_memory_draft`), and whether the extraction model wrote it.

    A draft an earlier sweep kept in the task's claim row (its extraction was paid, its
    consolidation failed) is used without a call while the task is unchanged since.
    """
    model = (prefs.extract_model or "").strip()
    kept = claims.found.get(task.pk)
    if model and kept is not None and kept.task_updated_at == task.updated_at:
        note = "extraction kept from an earlier sweep"
        return MemoryDraft(kept.content, list(kept.keywords), note=note), True
    draft = _memory_draft(task, prefs=prefs, calls=calls)
    return draft, bool(model) and not draft.note


def _model_steps(prefs: AutoMemorySettings) -> int:
    """How many model calls a task of this user may need (repairs aside): extraction and
    consolidation, each when its model is set."""
    return sum(1 for model in (prefs.extract_model, prefs.consolidation_model) if model)


def _memory_draft(
    task: Task, *, prefs: AutoMemorySettings, calls: SweepModelCalls | None
) -> MemoryDraft:
    """The content step: the memory text (and keywords) for `task`.

    With the user's `extract_model`, the model's (`model_memory_draft`); its failures are
    raised, unless `fallback_to_deterministic` turns an unavailable model or a spent budget
    into the deterministic text, which the log detail then says. Without a model, the
    configured deterministic strategy. Raises `NoDurableSignal` when there is nothing to
    remember.
    """
    model = (prefs.extract_model or "").strip()
    if model:
        try:
            return model_memory_draft(task, model=model, calls=calls)
        except (ModelUnavailable, MemoryBudgetExhausted) as exc:
            if not prefs.fallback_to_deterministic:
                raise
            reason = (
                Reason.MEMORY_BUDGET_EXHAUSTED
                if isinstance(exc, MemoryBudgetExhausted)
                else Reason.MODEL_UNAVAILABLE
            )
            logger.warning(
                "auto memory: task %s gets the deterministic text (%s: %s)", task.pk, reason, exc
            )
            note = f"deterministic text written ({reason}: {exc})"
            return MemoryDraft(_deterministic_content(task), note=note)
    return MemoryDraft(_deterministic_content(task))


def _deterministic_content(task: Task) -> str:
    content = render_memory_content(task)
    if not content.strip():
        raise NoDurableSignal("the result adds nothing to the goal")
    return content


def _check_verifiable(private: PrivateTexts) -> None:
    """Raise `_PrivateContent` when the task received memories whose text cannot be checked."""
    if private.unverifiable:
        raise _PrivateContent(
            f"{private.unverifiable} of the memories injected into the task are gone and "
            "their text cannot be checked"
        )


def _extract_one(
    task: Task,
    attempts: int = 3,
    *,
    private: PrivateTexts | None = None,
    draft: MemoryDraft | None = None,
    prefs: AutoMemorySettings | None = None,
    calls: SweepModelCalls | None = None,
) -> WriteResult:
    """Write the task's memory and settle which memory of its goal stays active.

    Returns what was written (the log's outcome, reason, memory and detail, and how many
    memories became superseded). Raises `_PrivateContent` instead of writing a memory that
    would hold the text of one of the `private` (user-level) memories, whatever the content
    strategy. Races with other sweeps end in an IntegrityError from one of the unique
    constraints: losing the one-memory-per-task race (`memory_one_auto_per_task`, or the
    task's provenance link) means the work is done; losing the one-active-per-goal race
    means try again.

    `draft` is the content step's answer (`_memory_draft`: text and keywords, passed on to
    `_write_memory`); None: the deterministic text. With the user's `consolidation_model`
    (`prefs`), the model decides how the memory joins the project's similar ones first
    (`_consolidation_decision`, outside any transaction), and its failures are raised like
    the content step's.
    """
    private = private or PrivateTexts()
    _check_verifiable(private)
    draft = draft or MemoryDraft(_deterministic_content(task))
    content, keywords = draft.content, list(draft.keywords)
    leaked = matching_fingerprints(content, fingerprints=private.fingerprints)
    if leaked:
        count = len({fingerprint.memory_id or id(fingerprint) for fingerprint in leaked})
        raise _PrivateContent(
            f"the memory would hold the text of {count} user-level "
            f"{'memory' if count == 1 else 'memories'}"
        )
    key = goal_key(task)
    decision = _consolidation_decision(
        task, content=content, keywords=keywords, prefs=prefs, calls=calls, private=private
    )
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return _write_memory(
                    task, content=content, keywords=keywords, key=key, decision=decision
                )
        except IntegrityError:
            link = (
                MemorySourceTask.objects.filter(task_id=task.pk)
                .values_list("memory_id", "merged")
                .first()
            )
            if link is not None:
                raise _AlreadyExtracted(
                    memory_id=link[0], reason=Reason.MERGED if link[1] else Reason.NEW
                ) from None
            memory_id = (
                IdentityMemory.objects.filter(source=MemorySource.AUTO, source_task_id=task.pk)
                .values_list("pk", flat=True)
                .first()
            )
            if memory_id is not None:
                raise _AlreadyExtracted(memory_id=memory_id, reason=Reason.NEW) from None
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _consolidation_decision(
    task: Task,
    *,
    content: str,
    keywords: list[str],
    prefs: AutoMemorySettings | None,
    calls: SweepModelCalls | None,
    private: PrivateTexts,
) -> Decision | None:
    """How the new memory joins the project's memories, by the user's `consolidation_model`.

    None (the same-goal rule alone) without a model. With one, `memory_consolidation_decide`
    (no call when the project has no similar active memory). An unavailable model or a spent
    budget is raised (the task waits), unless `fallback_to_deterministic` is on: then the
    memory is added under the same-goal rule. A merged text that would hold a user-level
    memory's text raises `_PrivateContent`, like any memory text.
    """
    model = ((prefs.consolidation_model if prefs is not None else None) or "").strip()
    if not model:
        return None
    try:
        decision = memory_consolidation_decide(
            task=task, content=content, keywords=keywords, model=model, calls=calls
        )
    except (ModelUnavailable, MemoryBudgetExhausted) as exc:
        if not prefs.fallback_to_deterministic:
            raise
        logger.warning("auto memory: task %s added without consolidation (%s)", task.pk, exc)
        return Decision(Action.ADD, reason=f"consolidation skipped: {exc}")
    if decision.text and matching_fingerprints(decision.text, fingerprints=private.fingerprints):
        raise _PrivateContent("the merged memory would hold the text of a user-level memory")
    return decision


def _write_memory(
    task: Task, *, content: str, keywords: list[str], key: str, decision: Decision | None
) -> WriteResult:
    """Apply `decision` (None: the same-goal rule alone) in the caller's transaction."""
    return memory_decision_apply(
        task=task, content=content, keywords=keywords, key=key, decision=decision
    )


# --- Retraction --------------------------------------------------------------------------------


@transaction.atomic
def _retract(task: Task, *, seen: str, now: datetime, force: bool) -> bool:
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
        IdentityMemory.objects.select_for_update()
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
            restored_id = _restore_displaced(memory)
        undone = consolidation_retirements_undo(memory)
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


def _restore_displaced(retracted: IdentityMemory) -> int | None:
    """Make active again the auto memory the retracted one displaced, if there is one."""
    displaced = (
        IdentityMemory.objects.select_for_update()
        .filter(
            superseded_by=retracted,
            source=MemorySource.AUTO,
            status=MemoryStatus.SUPERSEDED,
            project_id=retracted.project_id,
            goal_key=retracted.goal_key,
        )
        .order_by(F("source_finished_at").desc(nulls_last=True), "-source_task_id")
        .first()
    )
    if displaced is None:
        return None
    try:
        with transaction.atomic():
            IdentityMemory.objects.filter(pk=displaced.pk).update(
                status=MemoryStatus.ACTIVE, superseded_by=None, updated_at=timezone.now()
            )
    except IntegrityError:
        # A sweep wrote a newer active memory of the goal meanwhile: that one stays.
        return None
    return displaced.pk


# --- The log -----------------------------------------------------------------------------------


def _log_row(
    task: Task, verdict: _Verdict, previous: AutoMemoryLog | None, now: datetime, force: bool
) -> AutoMemoryLog:
    attempts = (previous.attempts + 1) if previous else 1
    retry_after = verdict.retry_after
    if verdict.outcome == Outcome.ERROR:
        retry_after = now + ERROR_BACKOFF_BASE * min(2 ** (attempts - 1), 60)
    elif verdict.reason == Reason.MODEL_UNAVAILABLE and retry_after is None:
        retry_after = now + _model_unavailable_backoff(previous)
    return AutoMemoryLog(
        task_id=task.pk,
        user_id=task.user_id,
        outcome=verdict.outcome,
        reason=verdict.reason,
        memory_id=verdict.memory_id,
        forced=force,
        recheck=False,
        attempts=attempts,
        retry_after=retry_after,
        detail=verdict.detail,
        first_attempt_at=previous.first_attempt_at if previous else now,
        last_attempt_at=now,
    )


def _model_unavailable_backoff(previous: AutoMemoryLog | None) -> timedelta:
    """How long a task waits after `model_unavailable`: the base wait, doubled each time in
    a row the model was away, at most the maximum."""
    base = timedelta(seconds=conf.get("MODEL_UNAVAILABLE_RETRY_SECONDS"))
    ceiling = timedelta(seconds=conf.get("MODEL_UNAVAILABLE_RETRY_MAX_SECONDS"))
    wait = base
    if (
        previous is not None
        and previous.reason == Reason.MODEL_UNAVAILABLE
        and previous.retry_after is not None
    ):
        wait = max(base, (previous.retry_after - previous.last_attempt_at) * 2)
    return min(wait, ceiling)


_LOG_UPDATE_FIELDS = [
    "outcome",
    "reason",
    "memory",
    "forced",
    "recheck",
    "attempts",
    "retry_after",
    "detail",
    "last_attempt_at",
]


def _write_logs(tasks, *, verdicts, logs_by_task, now, force) -> None:
    """One upsert for the whole batch: one row per task, overwritten by each attempt."""
    rows = [_log_row(t, verdicts[t.pk], logs_by_task.get(t.pk), now, force) for t in tasks]
    # A skip or error must not overwrite an `extracted` row another sweep wrote meanwhile, and
    # a task another sweep wrote (a race lost here) keeps that sweep's row, with its reason;
    # this sweep's row stands in only while that one is missing (the other sweep failed).
    not_extracted_here = [
        row.task_id
        for row in rows
        if row.outcome != Outcome.EXTRACTED or verdicts[row.task_id].written_elsewhere
    ]
    extracted_meanwhile = set(
        AutoMemoryLog.objects.filter(
            task_id__in=not_extracted_here, outcome=Outcome.EXTRACTED
        ).values_list("task_id", flat=True)
    )
    rows = [row for row in rows if row.task_id not in extracted_meanwhile]
    AutoMemoryLog.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["task"], update_fields=_LOG_UPDATE_FIELDS
    )
