"""Reads for auto memory's pages and lists: the extraction log, the console's memory and task
pages. What a task may receive is `automemory.ranking`."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db import connection
from django.db.models import (
    Count,
    Exists,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Window,
)
from django.db.models.functions import Coalesce, Lower, TruncDate
from django.utils import timezone

from automemory import conf
from automemory.models import (
    AutoMemoryLog,
    FeedbackKind,
    MemoryFeedback,
    MemoryInjectionDay,
    MemorySourceTask,
    MemoryState,
    Reason,
    TaskMemoryShown,
    TaskMemoryState,
    memory_review,
    memory_usage,
    task_injected_ids,
)
from controlplane.access import (
    held_for_others,
    memories_visible_to,
    project_memories_visible_to,
    projects_visible_to,
    tasks_visible_to,
)
from controlplane.models import (
    IdentityMemory,
    Membership,
    MemoryScope,
    MemorySource,
    MemoryStatus,
    MemoryVisibility,
    Project,
    Task,
    TaskFollowup,
    UsageRecord,
)
from controlplane.rawsql import column, table
from controlplane.selectors import memory_list


def auto_memory_log_list(*, user) -> QuerySet[AutoMemoryLog]:
    """The extraction log of the tasks the user created, newest attempt first."""
    return AutoMemoryLog.objects.filter(user=user).order_by("-last_attempt_at", "-task_id")


def memory_feedback_list(*, memory: IdentityMemory) -> QuerySet[MemoryFeedback]:
    """What tasks and people said of one memory (its cites and reports), newest first. The
    caller has checked the memory is theirs to read."""
    return MemoryFeedback.objects.filter(memory=memory).order_by("-created_at", "-id")


# --- Console pages ----------------------------------------------------------------------------

CONSOLE_SEARCH_MAX_CHARS = 200


def _memory_page_queryset(memories: QuerySet[IdentityMemory]) -> QuerySet[IdentityMemory]:
    """Memories with everything a console row shows fetched up front (a fixed number of queries
    per page, whatever its length): author, approver, source task(s) and the memories each
    superseded or was superseded by, and its usage counters and report hold (auto memory's
    row, joined)."""
    return (
        memories.annotate(**memory_usage(), **memory_review())
        .select_related("created_by", "source_task", "superseded_by")
        .prefetch_related(
            Prefetch(
                "source_links",
                queryset=MemorySourceTask.objects.select_related("task").order_by(
                    "created_at", "id"
                ),
            ),
            Prefetch("supersedes", queryset=IdentityMemory.objects.order_by("-created_at", "-id")),
        )
    )


def console_memory_list(**filters) -> QuerySet[IdentityMemory]:
    """`controlplane.selectors.memory_list` (same arguments) with what a console row shows."""
    return _memory_page_queryset(memory_list(**filters))


def memory_detail_get(*, user, memory_id: int) -> IdentityMemory | None:
    """One memory the user may see (their own user-level one or one of their projects'),
    with its provenance fetched; None when there is no such memory for them."""
    memories = memories_visible_to(user).filter(pk=memory_id).select_related("project")
    return _memory_page_queryset(memories).first()


def console_project_list(*, user) -> QuerySet[Project]:
    """The user's projects with their role and how many memories each holds, by name."""
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    memory_count = (
        IdentityMemory.objects.filter(project=OuterRef("pk"), scope=MemoryScope.PROJECT)
        .exclude(held_for_others(user))
        .order_by()
        .values("project")
        .annotate(total=Count("id"))
        .values("total")
    )
    return (
        projects_visible_to(user)
        .annotate(
            my_role=Subquery(role),
            memory_count=Coalesce(Subquery(memory_count), 0),
        )
        .order_by(Lower("name"), "id")
    )


@dataclass(frozen=True)
class InjectedMemory:
    """A memory a task's first turn received, as the viewer may see it: the memory (None
    when deleted or private), and whether it still exists."""

    memory_id: int
    memory: IdentityMemory | None
    exists: bool


@dataclass(frozen=True)
class TaskPage:
    """What the console's task page shows besides the task itself."""

    followups: list[TaskFollowup]
    runs: list[UsageRecord]
    injected: list[InjectedMemory]
    produced_memory: IdentityMemory | None
    produced_link: MemorySourceTask | None
    log: AutoMemoryLog | None
    # The task produced a memory held for another author: nothing of it is shown.
    withheld: bool = False


def task_page_get(*, user, task: Task) -> TaskPage:
    """The task's messages, runs, injected memories (each as the viewer may see it), the
    memory the task produced and the log row that explains it. The caller has checked the
    user may read the task. A fixed number of queries."""
    followups = list(
        TaskFollowup.objects.filter(task=task).select_related("from_task").order_by("id")
    )
    runs = list(UsageRecord.objects.filter(task=task).order_by("id"))
    ids = task_injected_ids(task)
    visible = {m.pk: m for m in memories_visible_to(user).filter(pk__in=ids)} if ids else {}
    existing = (
        set(IdentityMemory.objects.filter(pk__in=ids).values_list("pk", flat=True))
        if ids
        else set()
    )
    injected = [
        InjectedMemory(memory_id=pk, memory=visible.get(pk), exists=pk in existing) for pk in ids
    ]
    link = (
        MemorySourceTask.objects.filter(task=task)
        .select_related("memory", "memory__superseded_by")
        .first()
    )
    produced = link.memory if link is not None else None
    if produced is None:
        produced = (
            IdentityMemory.objects.filter(source_task=task, source=MemorySource.AUTO)
            .select_related("superseded_by")
            .first()
        )
    log = AutoMemoryLog.objects.filter(task=task).select_related("memory").first()
    if produced is None and log is not None:
        produced = log.memory
    # A memory held for its author (privacy by consent) does not exist for anyone else:
    # neither it nor the log row that wrote it shows on its task's page.
    withheld = (produced is not None and _held_for_other(produced, user)) or (
        log is not None
        and (
            (log.memory is not None and _held_for_other(log.memory, user))
            # Held, then forgotten by its author: still theirs alone to know about.
            or (
                log.memory is None
                and log.reason == Reason.HELD_FOR_AUTHOR
                and task.user_id != getattr(user, "pk", None)
            )
        )
    )
    if withheld:
        produced, link, log = None, None, None
    return TaskPage(
        followups=followups,
        runs=runs,
        injected=injected,
        produced_memory=produced,
        produced_link=link,
        log=log,
        withheld=withheld,
    )


def _held_for_other(memory: IdentityMemory, user) -> bool:
    return memory.visibility == MemoryVisibility.AUTHOR and memory.created_by_id != getattr(
        user, "pk", None
    )


# --- Review, history and health ---------------------------------------------------------------


def _held_for_review() -> Q:
    """Memories an owner has to look at: instruction-like and not approved, or reported."""
    held = MemoryState.objects.filter(
        Q(flagged=True, approved_at__isnull=True) | Q(report_hold_at__isnull=False),
        memory_id=OuterRef("pk"),
    )
    return Q(Exists(held))


def review_queue_list(*, project, user) -> QuerySet[IdentityMemory]:
    """The project's memories held for an owner's review (awaiting approval or reported),
    as `user` sees them (never one held for another author), each with its reports newest
    first (`reports`, the reporting task and person fetched), most recently held first. A
    fixed number of queries per page. The caller has checked `user` may approve."""
    reports = (
        MemoryFeedback.objects.filter(kind=FeedbackKind.REPORT)
        .select_related("task", "user")
        .order_by("-created_at", "-id")
    )
    return (
        project_memories_visible_to(user, project_id=project.pk)
        .filter(_held_for_review())
        .annotate(**memory_usage(), **memory_review())
        .select_related("created_by", "source_task")
        .prefetch_related(Prefetch("feedback", queryset=reports, to_attr="reports"))
        .order_by(
            Coalesce("report_hold_at", "created_at").desc(),
            "-id",
        )
    )


def review_queue_count(*, project, user) -> int:
    """How many of the project's memories wait for an owner's review (one query)."""
    return (
        project_memories_visible_to(user, project_id=project.pk).filter(_held_for_review()).count()
    )


def held_for_me_list(*, project, user) -> QuerySet[IdentityMemory]:
    """The project's memories held for `user` as their author (privacy by consent): only
    they see them, until they share them. Newest first."""
    return (
        IdentityMemory.objects.filter(
            scope=MemoryScope.PROJECT,
            project_id=project.pk,
            visibility=MemoryVisibility.AUTHOR,
            created_by_id=user.pk,
        )
        .select_related("source_task")
        .order_by("-created_at", "-id")
    )


# How many entries of each kind a memory's page shows in its history.
MEMORY_HISTORY_LIMIT = 50


@dataclass(frozen=True)
class HistoryEntry:
    """One thing that happened to a memory: `injected` into a task's first turn, `shown` to
    a task by the memory tool, `cite` or `report` (with the feedback row)."""

    kind: str
    at: datetime
    task: Task | None = None
    feedback: MemoryFeedback | None = None


def _tasks_injected_with(memory_id: int) -> QuerySet[Task]:
    """Tasks whose first turn received the memory (their `TaskMemoryState`'s
    `injected_memory_ids` holds its id)."""
    if connection.vendor == "postgresql":
        return Task.objects.filter(auto_memory_state__injected_memory_ids__contains=[memory_id])
    # SQLite (and the rest): the JSON list's members, one by one.
    state = table(TaskMemoryState)
    ids = f"{state}.{column(TaskMemoryState, 'injected_memory_ids')}"
    return Task.objects.extra(
        where=[
            f"EXISTS (SELECT 1 FROM {state}, json_each({ids})"
            f" WHERE {state}.{column(TaskMemoryState, 'task')} = {table(Task)}.{column(Task, 'id')}"
            " AND json_each.value = %s)"
        ],
        params=[memory_id],
    )


def memory_history_get(*, user, memory: IdentityMemory) -> list[HistoryEntry]:
    """What happened to `memory`, newest first: the tasks it was injected into and shown to
    by the memory tool, its citations and its reports, each at most `MEMORY_HISTORY_LIMIT`
    and only through tasks `user` may read (a person's report has no task). Three queries.
    The caller has checked `user` may read the memory."""
    visible_tasks = tasks_visible_to(user)
    # A project memory goes only into its project's tasks; a user's own, only into theirs.
    owner = (
        Q(project_id=memory.project_id)
        if memory.scope == MemoryScope.PROJECT
        else Q(user_id=memory.user_id)
    )
    injected = (
        _tasks_injected_with(memory.pk)
        .filter(owner, pk__in=visible_tasks.values("pk"))
        .select_related("user")
        .order_by("-id")[:MEMORY_HISTORY_LIMIT]
    )
    shown = (
        TaskMemoryShown.objects.filter(memory_id=memory.pk, task__in=visible_tasks)
        .select_related("task", "task__user")
        .order_by("-created_at", "-id")[:MEMORY_HISTORY_LIMIT]
    )
    feedback = (
        MemoryFeedback.objects.filter(memory_id=memory.pk)
        .filter(Q(task__isnull=True) | Q(task__in=visible_tasks))
        .select_related("task", "task__user", "user")
        .order_by("-created_at", "-id")[: 2 * MEMORY_HISTORY_LIMIT]
    )
    entries = [
        HistoryEntry("injected", task.started_at or task.created_at, task=task) for task in injected
    ]
    entries += [HistoryEntry("shown", row.created_at, task=row.task) for row in shown]
    entries += [
        HistoryEntry(row.kind, row.created_at, task=row.task, feedback=row) for row in feedback
    ]
    entries.sort(key=lambda entry: entry.at, reverse=True)
    return entries


# The health page looks this many weeks back.
HEALTH_WEEKS = 8
HEALTH_TOP = 5
HEALTH_NEVER_CITED_SHOWN = 10


@dataclass(frozen=True)
class HealthWeek:
    """One week of a project's memory use: memories injected (one per task and memory),
    cited and reported, and memories created."""

    start: date
    injected: int
    cited: int
    reported: int
    created: int = 0

    @property
    def cite_rate(self) -> float | None:
        """Cited ÷ injected (None for a week nothing was injected)."""
        return self.cited / self.injected if self.injected else None


@dataclass(frozen=True)
class MemoryHealth:
    """A project's memory health as one member sees it (memories held for another author do
    not exist here): memories by state now, the last weeks' injections, citations and
    reports, memories injected often and never cited, and the most cited and reported."""

    states: dict[str, int]
    weeks: list[HealthWeek]
    never_cited_after: int
    never_cited_count: int
    never_cited: list[IdentityMemory]
    top_cited: list[IdentityMemory]
    top_reported: list[IdentityMemory]

    @property
    def injected(self) -> int:
        return sum(week.injected for week in self.weeks)

    @property
    def cited(self) -> int:
        return sum(week.cited for week in self.weeks)

    @property
    def reported(self) -> int:
        return sum(week.reported for week in self.weeks)

    @property
    def cite_rate(self) -> float | None:
        return self.cited / self.injected if self.injected else None


HEALTH_STATES = ("active", "held_for_review", "superseded", "archived")


def memory_health_get(*, project, user, now: datetime | None = None) -> MemoryHealth:
    """`project`'s memory health over the last `HEALTH_WEEKS` weeks (the last week ends
    today), as `user`, a member, sees it. Seven queries whatever the project's size, each an
    aggregate in the database: the states, the memories created per day, the feedback per
    day and kind, the project memories tasks received per day (`MemoryInjectionDay`, kept
    by injection: its cost follows the memories and days, not the tasks), the never-cited,
    the top cited and the top reported.

    Injected counts a memory once per task whose first turn received it; cited and reported
    count feedback rows (a task cites a memory once). Cite rate is cited ÷ injected.
    """
    now = now or timezone.now()
    today = timezone.localdate(now)
    first_day = today - timedelta(days=7 * HEALTH_WEEKS - 1)
    since = datetime.combine(first_day, time.min, tzinfo=timezone.get_current_timezone())
    memories = project_memories_visible_to(user, project_id=project.pk)
    held = _held_for_review()
    states = memories.aggregate(
        active=Count("pk", filter=Q(status=MemoryStatus.ACTIVE) & ~held),
        held_for_review=Count("pk", filter=Q(status=MemoryStatus.ACTIVE) & held),
        superseded=Count("pk", filter=Q(status=MemoryStatus.SUPERSEDED)),
        archived=Count("pk", filter=Q(status=MemoryStatus.ARCHIVED)),
    )

    def by_week(per_day, key=lambda *_: None) -> dict:
        """Per-day totals (rows of day, [kind,] total) summed into the window's weeks, for
        each `key(kind)`: {key: [total of week 0, ...]}."""
        weeks: dict = {}
        for day, *kind, total in per_day:
            index = (day - first_day).days // 7
            if 0 <= index < HEALTH_WEEKS:
                weeks.setdefault(key(*kind), [0] * HEALTH_WEEKS)[index] += total
        return weeks

    empty = [0] * HEALTH_WEEKS
    created = by_week(
        memories.filter(created_at__gte=since)
        .annotate(day=TruncDate("created_at"))
        .values_list("day")
        .annotate(total=Count("pk"))
        .order_by()
    ).get(None, empty)
    feedback = by_week(
        MemoryFeedback.objects.filter(created_at__gte=since, memory__in=memories.values("pk"))
        .annotate(day=TruncDate("created_at"))
        .values_list("day", "kind")
        .annotate(total=Count("pk"))
        .order_by(),
        key=lambda kind: kind,
    )
    cited = feedback.get(FeedbackKind.CITE, empty)
    reported = feedback.get(FeedbackKind.REPORT, empty)
    injected = by_week(
        MemoryInjectionDay.objects.filter(day__gte=first_day, memory__in=memories.values("pk"))
        .values_list("day")
        .annotate(total=Sum("tasks"))
        .order_by()
    ).get(None, empty)

    weeks = [
        HealthWeek(
            first_day + timedelta(days=7 * i), injected[i], cited[i], reported[i], created[i]
        )
        for i in range(HEALTH_WEEKS)
    ]
    after = int(conf.get("NEVER_CITED_AFTER"))
    memories = memories.annotate(**memory_usage())
    never_cited = list(
        memories.filter(status=MemoryStatus.ACTIVE, cite_count=0, injection_count__gte=after)
        .annotate(total=Window(Count("pk")))
        .order_by("-injection_count", "-id")[:HEALTH_NEVER_CITED_SHOWN]
    )
    recent = Q(feedback__created_at__gte=since)
    top_cited = list(
        memories.annotate(
            recent=Count("feedback", filter=recent & Q(feedback__kind=FeedbackKind.CITE))
        )
        .filter(recent__gt=0)
        .order_by("-recent", "-cite_count", "-id")[:HEALTH_TOP]
    )
    top_reported = list(
        memories.annotate(
            recent=Count("feedback", filter=recent & Q(feedback__kind=FeedbackKind.REPORT))
        )
        .filter(recent__gt=0)
        .order_by("-recent", "-report_count", "-id")[:HEALTH_TOP]
    )
    return MemoryHealth(
        states={name: states[name] for name in HEALTH_STATES},
        weeks=weeks,
        never_cited_after=after,
        never_cited_count=never_cited[0].total if never_cited else 0,
        never_cited=never_cited,
        top_cited=top_cited,
        top_reported=top_reported,
    )
