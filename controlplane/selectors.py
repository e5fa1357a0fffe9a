"""Reads for the API, always scoped through controlplane.access."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Left, NullIf

from controlplane.access import project_memories_visible_to, projects_visible_to, tasks_visible_to
from controlplane.models import (
    USAGE_TOKEN_FIELDS,
    IdentityMemory,
    Membership,
    MemoryScope,
    Project,
    Task,
    TaskDiff,
    TaskFollowup,
    UsageKind,
    UsageRecord,
)


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


def memory_list(
    *,
    user,
    project: Project | None = None,
    status: str | None = None,
    source: str | None = None,
    q: str | None = None,
) -> QuerySet[IdentityMemory]:
    """Memories newest first: a project's as `user` sees them (the caller has checked they are
    a member), or without `project` the user's own user-level memories; of one status and
    source, or holding `q` (case-insensitive), when given. The API and the console list these."""
    if project is None:
        memories = IdentityMemory.objects.filter(scope=MemoryScope.USER, user=user)
    else:
        memories = project_memories_visible_to(user, project_id=project.pk)
    if status:
        memories = memories.filter(status=status)
    if source:
        memories = memories.filter(source=source)
    if q:
        memories = memories.filter(content__icontains=q)
    return memories.order_by("-created_at", "-id")


@dataclass(frozen=True)
class MemoryRowExtra:
    """A value an app keeps about a memory in its own table and the memory API shows:
    `expression` reads it in a list's statement (an annotation on `IdentityMemory`), `read`
    from one memory object."""

    expression: Any
    read: Callable[[IdentityMemory], Any]


# Registered by apps (automemory: the usage counters, the report hold and the source tasks),
# so the host never imports them; a name nobody registered reads as the output's default.
_memory_row_extras: dict[str, MemoryRowExtra] = {}


def memory_row_extra_register(name: str, *, expression, read: Callable) -> None:
    """Show `name` in every memory output: `expression` in a list's rows, `read(memory)`
    for one memory."""
    _memory_row_extras[name] = MemoryRowExtra(expression=expression, read=read)


def memory_row_extra_expression(name: str):
    """The expression a list's row reads app value `name` with; None when no app registered
    it (the output then shows its default)."""
    extra = _memory_row_extras.get(name)
    return extra.expression if extra is not None else None


def memory_extra(memory: IdentityMemory, name: str, default):
    """An app's value `name` about one memory; `default` when no app registered it."""
    extra = _memory_row_extras.get(name)
    return extra.read(memory) if extra is not None else default


def task_diff_get(*, task: Task) -> TaskDiff | None:
    """The stored diff of the task's branch (its latest finished turn), or None before one
    changed anything."""
    return TaskDiff.objects.filter(task_id=task.pk).first()
