"""Reads for auto memory's pages and lists: the extraction log, the console's memory and task
pages. What a task may receive is `automemory.ranking`."""

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce, Lower

from automemory.models import AutoMemoryLog
from controlplane.access import (
    held_for_others,
    memories_visible_to,
    project_memories_visible_to,
    projects_visible_to,
)
from controlplane.models import (
    IdentityMemory,
    Membership,
    MemoryScope,
    MemorySource,
    MemorySourceTask,
    Project,
    Task,
    TaskFollowup,
    UsageRecord,
)


def auto_memory_log_list(*, user) -> QuerySet[AutoMemoryLog]:
    """The extraction log of the tasks the user created, newest attempt first."""
    return AutoMemoryLog.objects.filter(user=user).order_by("-last_attempt_at", "-task_id")


# --- Console pages ----------------------------------------------------------------------------

CONSOLE_SEARCH_MAX_CHARS = 200


def _memory_page_queryset(memories: QuerySet[IdentityMemory]) -> QuerySet[IdentityMemory]:
    """Memories with everything a console row shows fetched up front (a fixed number of queries
    per page, whatever its length): author, approver, source task(s) and the memories each
    superseded or was superseded by."""
    return memories.select_related(
        "created_by", "approved_by", "source_task", "superseded_by"
    ).prefetch_related(
        Prefetch(
            "source_links",
            queryset=MemorySourceTask.objects.select_related("task").order_by("created_at", "id"),
        ),
        Prefetch("supersedes", queryset=IdentityMemory.objects.order_by("-created_at", "-id")),
    )


def _memory_filtered(
    memories: QuerySet[IdentityMemory],
    *,
    source: str | None,
    status: str | None,
    q: str | None,
) -> QuerySet[IdentityMemory]:
    if source:
        memories = memories.filter(source=source)
    if status:
        memories = memories.filter(status=status)
    if q:
        memories = memories.filter(content__icontains=q)
    return _memory_page_queryset(memories).order_by("-created_at", "-id")


def project_memories_list(
    *,
    project,
    user,
    scope: str | None = None,
    source: str | None = None,
    status: str | None = None,
    q: str | None = None,
) -> QuerySet[IdentityMemory]:
    """The memories a project's tasks can draw on, newest first, for the console.

    Scope `project` (the default): the project's memories. Scope `user`: the signed-in
    user's own user-level memories (which their tasks in any project receive); they are
    private, so only ever the caller's own. The caller has checked membership.
    """
    if scope == MemoryScope.USER:
        memories = IdentityMemory.objects.filter(scope=MemoryScope.USER, user=user)
    else:
        memories = project_memories_visible_to(user, project_id=project.pk)
    return _memory_filtered(memories, source=source, status=status, q=q)


def my_memories_list(
    *, user, status: str | None = None, q: str | None = None
) -> QuerySet[IdentityMemory]:
    """The user's own user-level memories, newest first (only ever shown to that user)."""
    memories = IdentityMemory.objects.filter(scope=MemoryScope.USER, user=user)
    return _memory_filtered(memories, source=None, status=status, q=q)


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


def task_page_get(*, user, task: Task) -> TaskPage:
    """The task's messages, runs, injected memories (each as the viewer may see it), the
    memory the task produced and the log row that explains it. The caller has checked the
    user may read the task. A fixed number of queries."""
    followups = list(
        TaskFollowup.objects.filter(task=task).select_related("from_task").order_by("id")
    )
    runs = list(UsageRecord.objects.filter(task=task).order_by("id"))
    ids = task.injected_ids
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
    return TaskPage(
        followups=followups,
        runs=runs,
        injected=injected,
        produced_memory=produced,
        produced_link=link,
        log=log,
    )
