"""Reads for the API, always scoped through controlplane.access."""

import json

from django.db.models import Count, F, JSONField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Left, NullIf

from controlplane.access import project_memories_visible_to, projects_visible_to, tasks_visible_to
from controlplane.models import (
    USAGE_TOKEN_FIELDS,
    IdentityMemory,
    Membership,
    MemoryScope,
    MemorySourceTask,
    Project,
    Task,
    TaskDiff,
    TaskFollowup,
    UsageKind,
    UsageRecord,
)
from controlplane.services.memory_citations import citations_column, citations_read


def project_list(*, user) -> QuerySet[Project]:
    """The user's projects, each annotated with `my_role`."""
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    return (
        projects_visible_to(user)
        .select_related("created_by")
        .annotate(my_role=Subquery(role))
        .order_by("id")
    )


def project_get(*, user, project: Project) -> Project:
    """`project` re-read with the caller's role annotated (the caller has checked access)."""
    return project_list(user=user).get(pk=project.pk)


def membership_list(*, project: Project) -> QuerySet[Membership]:
    return Membership.objects.filter(project=project).select_related("user").order_by("id")


# How much of a task's goal (or prompt) a list reads to make its one-line title.
TITLE_SOURCE_CHARS = 2000
# What a task list leaves unread: the long texts (a list shows a title, not them).
TASK_LIST_DEFERRED = (
    "prompt",
    "goal",
    "continuation_prompt",
    "result_text",
    "failure_reason",
    "changed_files",
    "injected_memory_ids",
)


def task_list(*, user, project: Project, status: str | None = None) -> QuerySet[Task]:
    """Tasks of one project, newest first, optionally with one status; each with
    `title_source`, the head of its goal (or, without one, its prompt), and without its long
    texts, which a list does not show."""
    tasks = (
        tasks_visible_to(user)
        .filter(project=project)
        .select_related("user")
        .defer(*TASK_LIST_DEFERRED)
        .annotate(
            title_source=Left(Coalesce(NullIf("goal", Value("")), "prompt"), TITLE_SOURCE_CHARS)
        )
    )
    if status:
        tasks = tasks.filter(status=status)
    return tasks.order_by("-id")


def followup_list(*, task: Task) -> QuerySet[TaskFollowup]:
    return TaskFollowup.objects.filter(task=task).select_related("created_by").order_by("id")


def usage_record_list_for_task(*, task: Task) -> QuerySet[UsageRecord]:
    """A task's runs in the usage ledger, oldest first (the caller has checked access)."""
    return UsageRecord.objects.filter(task=task).order_by("id")


def thread_usage_get(*, task_id: int, thread_id: str) -> dict[str, int] | None:
    """The summed token counts of the task's recorded runs on agent thread `thread_id`.

    None when no run of that thread is recorded (or there is no thread yet): the thread's
    earlier usage is unknown, not zero. Rows carried over from before the ledger have no
    thread id, so they never pass for a thread's known usage.
    """
    if not thread_id:
        return None
    totals = UsageRecord.objects.filter(
        task_id=task_id, thread_id=thread_id, kind=UsageKind.TASK_RUN
    ).aggregate(runs=Count("id"), **{name: Sum(name) for name in USAGE_TOKEN_FIELDS})
    if not totals.pop("runs"):
        return None
    return {name: int(value or 0) for name, value in totals.items()}


def _memory_filter(
    memories: QuerySet[IdentityMemory], *, status: str | None, source: str | None
) -> QuerySet:
    if status:
        memories = memories.filter(status=status)
    if source:
        memories = memories.filter(source=source)
    # Rows of only what the API shows, with the authors' names and the source tasks beside them
    # (no model, user or link objects built): a page of any size is one statement.
    rows = memories.annotate(
        created_by_name=F("created_by__username"),
        approved_by_name=F("approved_by__username"),
        source_task_ids=SourceTaskIds(),
    ).order_by("-created_at", "-id")
    # The code each cites, read in the same statement (memory_citations).
    citations = citations_column()
    if citations is None:
        return rows.values(*MEMORY_LIST_FIELDS)
    return rows.annotate(citations=citations).values(*MEMORY_LIST_FIELDS, "citations")


def memory_row(memory: IdentityMemory) -> dict:
    """A memory in the lists' row shape (MEMORY_LIST_FIELDS), so one serializer writes both."""
    row = {name: getattr(memory, name) for name in MEMORY_LIST_FIELDS[:-3]}
    row["created_by_name"] = memory.created_by.username if memory.created_by_id else None
    row["approved_by_name"] = memory.approved_by.username if memory.approved_by_id else None
    ids = getattr(memory, "source_task_ids", None)
    row["source_task_ids"] = (
        ids if ids is not None else [link.task_id for link in memory.source_links.all()]
    )
    row["citations"] = citations_read(memory)
    return row


class SourceTaskIds(Subquery):
    """The ids of a memory's source tasks, in the order they went in (created_at, id), read in
    the memory's own row: `ARRAY(...)` on PostgreSQL, `json_group_array` over the ordered
    subquery on SQLite. Always a list, empty for a memory without sources."""

    def __init__(self) -> None:
        links = MemorySourceTask.objects.filter(memory_id=OuterRef("pk")).order_by(
            "created_at", "id"
        )
        super().__init__(links.values(source_task_id=F("task_id")), output_field=JSONField())

    def as_sql(self, compiler, connection, template=None, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return f"(SELECT json_group_array(source_task_id) FROM {sql})", params

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return f"ARRAY{sql}", params

    def get_db_converters(self, connection):
        return [_id_list]


def _id_list(value, expression, connection) -> list[int]:
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)


# The last three are read beside the memory's own columns (memory_row relies on the order).
MEMORY_LIST_FIELDS = (
    "pk",
    "scope",
    "project_id",
    "content",
    "source",
    "source_task_id",
    "status",
    "superseded_by_id",
    "created_by_id",
    "created_at",
    "updated_at",
    "injection_count",
    "last_injected_at",
    "cite_count",
    "last_cited_at",
    "report_count",
    "last_reported_at",
    "report_hold_at",
    "visibility",
    "flagged",
    "instruction_flags",
    "approved_at",
    "approved_by_id",
    "archived_at",
    "created_by_name",
    "approved_by_name",
    "source_task_ids",
)


def memory_list_for_user(*, user, status: str | None = None, source: str | None = None) -> QuerySet:
    """The user's own user-level memories, newest first, as MEMORY_LIST_FIELDS rows."""
    memories = IdentityMemory.objects.filter(scope=MemoryScope.USER, user=user)
    return _memory_filter(memories, status=status, source=source)


def memory_list_for_project(
    *, project: Project, user, status: str | None = None, source: str | None = None
) -> QuerySet:
    """A project's memories as `user` sees them (the caller has checked they are a member),
    newest first, as MEMORY_LIST_FIELDS rows."""
    memories = project_memories_visible_to(user, project_id=project.pk)
    return _memory_filter(memories, status=status, source=source)


def task_diff_get(*, task: Task) -> TaskDiff | None:
    """The stored diff of the task's branch (its latest finished turn), or None before one
    changed anything."""
    return TaskDiff.objects.filter(task_id=task.pk).first()
