"""Who may see and do what: the one place that scopes projects, tasks and memories to a user.

Non-members get 404 (the object does not exist for them); members without the needed
permission get 403. Staff have no special rights over projects.
"""

from functools import lru_cache

from django.db import connection
from django.db.models import Exists, Model, OuterRef, Q, QuerySet, Subquery
from rest_framework.exceptions import NotFound, PermissionDenied

from controlplane.models import (
    CREATE_TASK_ROLES,
    IdentityMemory,
    Membership,
    MemoryScope,
    MemoryVisibility,
    Project,
    Task,
)
from controlplane.rawsql import column, instances_from_row, qn, select_list, table

READ = "read"
CREATE_TASK = "create_task"
MANAGE_MEMBERS = "manage_members"
APPROVE_MEMORY = "approve_memory"
MANAGE_REPOSITORY = "manage_repository"
# Continue a task: create_task on its project, and be the user who created it (its
# conversation holds that user's private memories, and its runs are billed to them).
CONTINUE_TASK = "continue_task"


def role_allows(role: str | None, action: str) -> bool:
    """Whether a project role allows `action` (None: not a member, nothing allowed)."""
    if role is None:
        return False
    if action == READ:
        return True
    if action in (CREATE_TASK, CONTINUE_TASK):
        return role in CREATE_TASK_ROLES
    if action in (MANAGE_MEMBERS, APPROVE_MEMORY, MANAGE_REPOSITORY):
        return role == "owner"
    raise ValueError(f"unknown action {action!r}")


def project_role(*, user, project_id: int) -> str | None:
    """The user's role in the project, or None for a non-member."""
    if not getattr(user, "is_authenticated", False):
        return None
    return (
        Membership.objects.filter(project_id=project_id, user=user)
        .values_list("role", flat=True)
        .first()
    )


def projects_visible_to(user) -> QuerySet[Project]:
    """Projects the user is a member of (any role)."""
    if not getattr(user, "is_authenticated", False):
        return Project.objects.none()
    return Project.objects.filter(
        Exists(Membership.objects.filter(project=OuterRef("pk"), user=user))
    )


def tasks_visible_to(user) -> QuerySet[Task]:
    """Tasks of the projects the user is a member of."""
    if not getattr(user, "is_authenticated", False):
        return Task.objects.none()
    return Task.objects.filter(
        Exists(Membership.objects.filter(project=OuterRef("project_id"), user=user))
    )


def held_for_others(user) -> Q:
    """Project memories held for another author (privacy by consent): for `user` they do
    not exist."""
    return Q(visibility=MemoryVisibility.AUTHOR) & ~Q(created_by_id=getattr(user, "pk", None))


def memories_visible_to(user) -> QuerySet[IdentityMemory]:
    """The user's own user-level memories and the memories of their projects, but those held
    for another author."""
    if not getattr(user, "is_authenticated", False):
        return IdentityMemory.objects.none()
    return IdentityMemory.objects.filter(
        Q(scope=MemoryScope.USER, user=user)
        | Q(
            Exists(Membership.objects.filter(project=OuterRef("project_id"), user=user)),
            scope=MemoryScope.PROJECT,
        )
    ).exclude(held_for_others(user))


def project_memories_visible_to(user, *, project_id: int) -> QuerySet[IdentityMemory]:
    """A project's memories as a member sees them (the caller has checked membership): all
    but those held for another author."""
    return IdentityMemory.objects.filter(scope=MemoryScope.PROJECT, project_id=project_id).exclude(
        held_for_others(user)
    )


def _check(role: str | None, action: str, what: str) -> None:
    if role is None:
        raise NotFound(f"{what} not found.")
    if not role_allows(role, action):
        raise PermissionDenied(f"Your role ({role}) does not allow {action} on this project.")


def object_id_parse(value) -> int | None:
    """A database id from a path segment or form value, else None.

    Only ASCII digits within a positive 64-bit key's range count (not other scripts' digits,
    signs, spaces, or a number past the column's range), so a lookup with the result never
    raises: callers treat None as "no such object" and answer 404.
    """
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    number = int(text)
    return number if 0 < number < 2**63 else None


def _with_role(model: type[Model], pk: int | None, *, user, related: tuple[str, ...] = ()):
    """The `model` row with this primary key (None for none), its `related` objects loaded
    (foreign keys, or reverse one-to-ones that may be missing), and `access_role` set: the
    user's role in the row's project, None for a non-member. The object and the access check
    in one statement.

    Every project and task request makes this lookup, and compiling the ORM's query for it
    cost several times running it, so the statement is written once per process (`rawsql`).
    """
    if pk is None:
        return None
    member = user.pk if getattr(user, "is_authenticated", False) else None
    with connection.cursor() as cursor:
        cursor.execute(_with_role_sql(model, related, connection.vendor), [member, pk])
        row = cursor.fetchone()
    if row is None:
        return None
    targets = [model._meta.get_field(name).related_model for name in related]
    (found, *loaded), (role,) = instances_from_row((model, *targets), row)
    for name, instance in zip(related, loaded, strict=True):
        field = model._meta.get_field(name)
        if field.concrete:
            setattr(found, name, instance)
        else:  # a reverse one-to-one: no row reads as none (not as a lazy load)
            field.set_cached_value(found, instance if instance.pk is not None else None)
    found.access_role = role
    return found


@lru_cache
def _with_role_sql(model: type[Model], related: tuple[str, ...], vendor: str) -> str:
    columns = [select_list(model, "o")[0]]
    joins = []
    for number, name in enumerate(related):
        field = model._meta.get_field(name)
        target, alias = field.related_model, f"r{number}"
        columns.append(select_list(target, alias)[0])
        if field.concrete:
            joins.append(
                f"JOIN {table(target)} {alias} "
                f"ON {alias}.{qn(target._meta.pk.column)} = o.{column(model, name)}"
            )
        else:  # a reverse one-to-one an app keeps: the row may be missing
            joins.append(
                f"LEFT JOIN {table(target)} {alias} "
                f"ON {alias}.{qn(field.field.column)} = o.{qn(model._meta.pk.column)}"
            )
    pk = f"o.{qn(model._meta.pk.column)}"
    project = pk if model is Project else f"o.{column(model, 'project')}"
    role = member_role_sql(project_id_sql=project, user_id_sql="%s")
    return (
        f"SELECT {', '.join(columns)}, ({role}) FROM {table(model)} o {' '.join(joins)} "
        f"WHERE {pk} = %s"
    )


def member_role_sql(*, project_id_sql: str, user_id_sql: str) -> str:
    """The user's role in the project as a scalar subquery on the SQL expressions given (NULL
    for a non-member), for statements that fold the access check into their own read."""
    return (
        f"SELECT m.{column(Membership, 'role')} FROM {table(Membership)} m "
        f"WHERE m.{column(Membership, 'project')} = {project_id_sql} "
        f"AND m.{column(Membership, 'user')} = {user_id_sql} LIMIT 1"
    )


def task_user_role() -> Subquery:
    """For a query over tasks: the role of each task's own user in its project (NULL once
    they are no longer a member), to be checked with `task_user_may_read`."""
    return Subquery(
        Membership.objects.filter(project=OuterRef("project_id"), user=OuterRef("user_id")).values(
            "role"
        )[:1]
    )


def task_user_may_read(role: str | None) -> bool:
    """Whether a task's user, whose role in the task's project is `role` (read with the task:
    `task_user_role`, `member_role_sql`), may still read that project: what their task's
    agent and its memory key may reach is what they may."""
    return role_allows(role, READ)


def project_get_for(*, user, project_id, action: str = READ) -> Project:
    """The project if the user may perform `action` on it; 404 for non-members, 403 else."""
    project = _with_role(Project, object_id_parse(project_id), user=user)
    _check(project.access_role if project else None, action, "Project")
    return project


# One-to-one rows of a task or a memory that apps keep in their own tables and show with it
# (automemory: its state of the task, of the memory), read in the object's own statement.
# Apps register their relation's name, so the host never imports them.
_related: dict[type[Model], list[str]] = {Task: [], IdentityMemory: []}


def related_register(model: type[Model], name: str) -> None:
    """Read the reverse one-to-one relation `name` with every `model` object (a task or a
    memory) that `task_get_for` / `memory_get_for_*` read."""
    if name not in _related[model]:
        _related[model].append(name)


def task_get_for(*, user, task_id, action: str = READ) -> Task:
    """The task if the user may perform `action` on its project; 404 for non-members, 403 else."""
    # With its project and user: the task's pages show both.
    task = _with_role(
        Task, object_id_parse(task_id), user=user, related=("project", "user", *_related[Task])
    )
    _check(task.access_role if task else None, action, "Task")
    if action == CONTINUE_TASK and task.user_id != user.pk:
        raise PermissionDenied(
            "Only the user who created this task may continue it: its conversation holds "
            "their own memories, and its runs are billed to them. Start a task of your own."
        )
    return task


def memory_allows(memory: IdentityMemory, *, user, role: str | None, action: str) -> bool:
    """Whether `user`, whose role in the memory's project is `role`, may do `action` on it:
    their own user-level memory allows everything, another's nothing; a project memory
    follows the role. The rule of `memory_get_for_*`, for pages that show what one may do."""
    if memory.scope == MemoryScope.USER:
        return memory.user_id == getattr(user, "pk", None)
    if memory.visibility == MemoryVisibility.AUTHOR:
        return memory.created_by_id == getattr(user, "pk", None) and role is not None
    return role_allows(role, action)


def _memory_get_for(*, user, memory_id, action: str) -> IdentityMemory:
    # The memory, its apps' rows and the caller's role in its project: one statement.
    memory = _with_role(
        IdentityMemory, object_id_parse(memory_id), user=user, related=(*_related[IdentityMemory],)
    )
    if memory is None:
        raise NotFound("Memory not found.")
    if memory.scope == MemoryScope.USER:
        if not memory_allows(memory, user=user, role=None, action=action):
            raise NotFound("Memory not found.")
        return memory
    role = memory.access_role
    if memory.visibility == MemoryVisibility.AUTHOR:
        # Held for its author: they may do anything a member may do with their own memory
        # (share, edit, forget it); for everyone else it does not exist.
        if role is None or memory.created_by_id != user.pk:
            raise NotFound("Memory not found.")
        if action == APPROVE_MEMORY:
            _check(role, action, "Memory")
        return memory
    _check(role, action, "Memory")
    return memory


def memory_get_for_read(*, user, memory_id) -> IdentityMemory:
    """A memory the user may see: their own user-level one, or one of their projects'."""
    return _memory_get_for(user=user, memory_id=memory_id, action=READ)


def memory_get_for_delete(*, user, memory_id) -> IdentityMemory:
    """A memory the user may forget: their own user-level one, or a project one with create_task."""
    return _memory_get_for(user=user, memory_id=memory_id, action=CREATE_TASK)


def memory_get_for_change(*, user, memory_id) -> IdentityMemory:
    """A memory the user may edit or restore: the same rule as forgetting it (their own
    user-level memory, or a project memory with create_task: owners and members)."""
    return _memory_get_for(user=user, memory_id=memory_id, action=CREATE_TASK)


def memory_get_for_approve(*, user, memory_id) -> IdentityMemory:
    """A memory the user may approve: project owners only (403 for other members, 404 for
    non-members). A user-level memory is returned to its user (their own flagged text is
    approved by its author when written)."""
    return _memory_get_for(user=user, memory_id=memory_id, action=APPROVE_MEMORY)
