"""Candidates: the completed tasks a sweep looks at, each with everything its phases read.

Two bounded sources, so a sweep grows with pending work, not with history: the completed
tasks changed since the sweep's cursor, and the retry set (transient skips and errors whose
`retry_after` has come, stable skips marked for a recheck after a settings or flags change;
a user's own sweep takes that user's retry set whatever its `retry_after`, and when forced
the user's skips). Then one batch read builds a `Candidate` per task: its log row, the
user's settings, the task's flags, whether it received messages, its external events, what
was injected into it and its kept draft. The phases read the candidate, never the database,
for these; nothing is stamped onto model instances.

Its goal key (`text.goal_key`) is computed once, when its texts are read.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, Min, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.db.models.sql import Query

from automemory.models import (
    AutoMemoryLog,
    AutoMemorySettings,
    ExtractionDraft,
    Outcome,
    SweepState,
    TaskAutoMemoryFlags,
)
from automemory.models.log import (
    MAX_ERROR_ATTEMPTS,
    RETRY_CONDITION,
    SKIPPED_CONDITION,
    STABLE_REASONS,
    TRANSIENT_REASONS,
)
from automemory.services.extraction.cursor import Point, changed_since, cursor_read
from automemory.services.preferences import effective_switch
from automemory.services.provenance import (
    NOTHING_INJECTED,
    Fingerprint,
    Injected,
    PrivateTexts,
    injected_for,
)
from automemory.services.text import goal_key
from controlplane.models import (
    IdentityMemory,
    MemorySource,
    Task,
    TaskEvent,
    TaskFollowup,
    TaskStatus,
)

# Executor events that bring in context from outside the task (`TaskEvent.kind`).
EXTERNAL_EVENT_KINDS = ("mcp_tool_call", "web_search")

# The texts of a task (the long columns), read only for the tasks a sweep keeps.
TASK_TEXTS = ("prompt", "goal", "continuation_prompt", "result_text", "failure_reason")


@dataclass(frozen=True)
class ExternalEvent:
    """An MCP tool call or a web search recorded in one of the task's runs."""

    kind: str
    server: str | None
    tool: str | None
    search_query: str | None


@dataclass
class Candidate:
    """One task on its way through the sweep's phases, with what they read of it.

    `changed` says it came from the read of tasks changed since the cursor (a task of that
    read left for a later sweep holds the cursor back); `extracted_before` that an earlier
    sweep extracted it and it completed again since (only its external context is checked:
    a memory whose task saw some later is retracted). `may_have_draft` says a paid draft may
    be stored for it (one was read, or the user's extraction model may write one this
    sweep). `private` and `held_for_author` are filled by the privacy phase for the tasks
    that reach drafting.
    """

    task: Task
    log: AutoMemoryLog | None
    changed: bool
    prefs: AutoMemorySettings = field(default_factory=AutoMemorySettings)
    flags: TaskAutoMemoryFlags | None = None
    # Whether the task may have a memory: its `generate_memories` flag, else the user's.
    generate: bool = True
    received_message: bool = False
    events: list[ExternalEvent] = field(default_factory=list)
    injected: Injected = NOTHING_INJECTED
    # `injected.fingerprints`: every fingerprint to remove from what the task wrote.
    injected_fingerprints: list[Fingerprint] = field(default_factory=list)
    kept_draft: ExtractionDraft | None = None
    may_have_draft: bool = False
    goal_key: str = ""
    private: PrivateTexts | None = None
    # Set by the privacy phase: its memory is written held for the task's user.
    held_for_author: bool = False
    extracted_before: bool = field(init=False)

    def __post_init__(self) -> None:
        self.extracted_before = self.log is not None and self.log.outcome == Outcome.EXTRACTED


@dataclass
class CandidateRead:
    """What the sweep read: its candidates, and where its read of changed tasks stopped."""

    candidates: list[Candidate]
    read_at: datetime
    stopped_at: Point | None


def _may_have_new_answer(task: Task, log: AutoMemoryLog | None, *, changed: bool) -> bool:
    """Whether `task` (its log row `log`) goes to the gates, or to a retraction check.

    Never for a task extracted (even if its memory was deleted since) or retracted. For a
    task read because it `changed` since the cursor: not when its transient skip or error is
    the retry set's (with its back-off), nor when it is a stable skip that holds (no change
    since it was tried, no recheck asked); an extracted task that changed since is kept for
    a retraction check only.
    """
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


def _examine(task_ids: Iterable[int], *, changed: bool) -> list[Candidate]:
    """The completed tasks among `task_ids` that may have a new answer, oldest change first.

    Read by primary key with the log row joined, and one read of which have an auto memory,
    so that every database does index lookups whatever the size of the history (an anti-join
    inside an OR lets a planner scan the whole log instead).
    """
    task_ids = list(task_ids)
    if not task_ids:
        return []
    # Most tasks read are settled history the cursor passes over: their texts are read
    # only for the tasks kept, in one more query.
    tasks = (
        Task.objects.filter(pk__in=task_ids, status=TaskStatus.COMPLETED)
        .select_related("auto_memory_log")
        .defer(*TASK_TEXTS)
        .order_by("updated_at", "id")
    )
    with_memory = set(
        IdentityMemory.objects.filter(
            source=MemorySource.AUTO, source_task_id__in=task_ids
        ).values_list("source_task_id", flat=True)
    )
    kept = []
    for task in tasks:
        log = getattr(task, "auto_memory_log", None)
        extracted = log is not None and log.outcome == Outcome.EXTRACTED
        if task.pk in with_memory and not extracted:
            continue
        if _may_have_new_answer(task, log, changed=changed):
            kept.append(Candidate(task=task, log=log, changed=changed))
    if kept:
        texts = Task.objects.filter(pk__in=[c.task.pk for c in kept]).values_list("pk", *TASK_TEXTS)
        by_id = {row[0]: row[1:] for row in texts}
        for candidate in kept:
            for name, value in zip(TASK_TEXTS, by_id[candidate.task.pk], strict=True):
                setattr(candidate.task, name, value)
            candidate.goal_key = goal_key(candidate.task)
    return kept


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


def _read(
    completed: QuerySet[Task],
    *,
    after: Point | None,
    retries: list[QuerySet],
    limit: int,
    read_at: datetime,
) -> CandidateRead:
    points = changed_since(completed, after, limit=limit)
    fresh = _examine([task_id for _, task_id in points], changed=True)
    retry_ids: set[int] = set()
    for retry in retries:
        retry_ids |= set(
            retry.order_by("last_attempt_at").values_list("task_id", flat=True)[:limit]
        )
    retry_ids -= {candidate.task.pk for candidate in fresh}
    again = _examine(sorted(retry_ids), changed=False)
    stopped_at = points[-1] if len(points) >= limit else None
    return CandidateRead(fresh + again, read_at=read_at, stopped_at=stopped_at)


def global_candidates_read(
    *, state: SweepState | None, now: datetime, force: bool, limit: int, read_at: datetime
) -> CandidateRead:
    """Everyone's tasks that may have a new answer since the global sweep's cursor."""
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
    return _read(
        Task.objects.filter(status=TaskStatus.COMPLETED),
        after=cursor_read([state] if state is not None else []),
        retries=[retry],
        limit=limit,
        read_at=read_at,
    )


def user_candidates_read(
    *, user_id: int, states: list[SweepState], force: bool, limit: int, read_at: datetime
) -> CandidateRead:
    """One user's tasks that may have a new answer: changed since the later of the global
    cursor and the user's own, the user's retry set whatever its `retry_after` (so the
    caller hears `not_idle` now), and when forced the user's skips."""
    logs = AutoMemoryLog.objects.filter(user_id=user_id, retracted_at__isnull=True)
    # One read per partial index, each spelled as built, so each index is used.
    retries = [logs.filter(_as_index_spells_it(AutoMemoryLog, RETRY_CONDITION))]
    if force:
        retries.append(logs.filter(_as_index_spells_it(AutoMemoryLog, SKIPPED_CONDITION)))
    return _read(
        Task.objects.filter(user_id=user_id, status=TaskStatus.COMPLETED),
        after=cursor_read(states),
        retries=retries,
        limit=limit,
        read_at=read_at,
    )


def _external_events(task_ids: list[int]) -> dict[int, list[ExternalEvent]]:
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
    events: dict[int, list[ExternalEvent]] = {}
    for row in rows:
        events.setdefault(row["task_id"], []).append(
            ExternalEvent(row["kind"], row["server"], row["tool"], row["search_query"])
        )
    return events


def candidate_inputs_read(candidates: list[Candidate]) -> None:
    """Fill in what every phase reads of each candidate, in a fixed number of queries for
    the whole batch (settings, flags, messages, events, injected memories, kept drafts)."""
    if not candidates:
        return
    task_ids = [candidate.task.pk for candidate in candidates]
    user_ids = {candidate.task.user_id for candidate in candidates}
    settings_by_user = {
        row.user_id: row for row in AutoMemorySettings.objects.filter(user_id__in=user_ids)
    }
    flags_by_task = {
        row.task_id: row for row in TaskAutoMemoryFlags.objects.filter(task_id__in=task_ids)
    }
    messaged = set(
        TaskFollowup.objects.filter(task_id__in=task_ids)
        .order_by()
        .values_list("task_id", flat=True)
        .distinct()
    )
    events = _external_events(task_ids)
    drafts = {row.task_id: row for row in ExtractionDraft.objects.filter(task_id__in=task_ids)}
    tasks = []
    for candidate in candidates:
        task = candidate.task
        tasks.append(task)
        candidate.prefs = settings_by_user.get(task.user_id) or AutoMemorySettings(
            user_id=task.user_id
        )
        candidate.flags = flags_by_task.get(task.pk)
        flag = candidate.flags.generate_memories if candidate.flags is not None else None
        candidate.generate = effective_switch(flag, candidate.prefs.generate_memories)
        candidate.received_message = task.pk in messaged
        candidate.events = events.get(task.pk, [])
        candidate.kept_draft = drafts.get(task.pk)
        candidate.may_have_draft = candidate.kept_draft is not None or bool(
            (candidate.prefs.extract_model or "").strip()
        )
    injected = injected_for(tasks)
    for candidate in candidates:
        candidate.injected = injected.get(candidate.task.pk, NOTHING_INJECTED)
        candidate.injected_fingerprints = candidate.injected.fingerprints
