"""Queueing tasks, continuing finished ones, delivering inter-task messages, and showing what
agents wrote to the task's other readers."""

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from controlplane.access import tasks_visible_to
from controlplane.errors import ConflictError, DomainError
from controlplane.limits import (
    GOAL_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    PROMPT_MAX_CHARS,
    text_require,
)
from controlplane.models import Project, Repository, Task, TaskFollowup, TaskKind, TaskStatus
from controlplane.repository_urls import branch_name_problem
from controlplane.services.audit import audit_record


@transaction.atomic
def task_create(
    *,
    user,
    project: Project,
    prompt: str,
    goal: str | None = None,
    kind: str = TaskKind.STANDARD,
    parent_task_id: int | None = None,
    branch: str | None = None,
) -> Task:
    """Queue the first turn of a new task. A parent task must belong to the same project.

    On a project with a repository the task works on `branch` (default: the repository's
    default branch), which the worker resolves to a commit when it claims the first turn;
    a project without one takes no branch and runs as it always did."""
    text_require(prompt, field="prompt", max_chars=PROMPT_MAX_CHARS)
    if goal is not None:
        text_require(goal, field="goal", max_chars=GOAL_MAX_CHARS)
    if kind not in TaskKind.values:
        raise DomainError(f'"{kind}" is not a valid choice.', field="kind")
    parent = None
    if parent_task_id is not None:
        parent = Task.objects.filter(pk=parent_task_id, project=project).first()
        if parent is None:
            raise DomainError("No task with this id in this project.", field="parent_task_id")
    branch = _task_branch(project=project, branch=branch)
    task = Task.objects.create(
        project=project,
        user=user,
        prompt=prompt,
        goal=goal,
        kind=kind,
        parent_task=parent,
        status=TaskStatus.QUEUED,
        turn=1,
        queued_at=timezone.now(),
        branch=branch,
    )
    audit_record(
        action="task_created",
        actor=user,
        target_type="task",
        target_id=task.pk,
        data={
            "project_id": project.pk,
            "kind": kind,
            "parent_task_id": parent_task_id,
            **({"branch": branch} if branch else {}),
        },
    )
    return task


def _task_branch(*, project: Project, branch: str | None) -> str:
    """The branch a new task works on: `branch`, else the repository's default; "" for a
    project without a repository (where a branch is a 400)."""
    default = (
        Repository.objects.filter(project=project).values_list("default_branch", flat=True).first()
    )
    if branch is None:
        return default or ""
    if default is None:
        raise DomainError("This project has no repository.", field="branch")
    problem = branch_name_problem(branch) if isinstance(branch, str) else "Not a valid string."
    if problem:
        raise DomainError(problem, field="branch")
    return branch


@transaction.atomic
def task_continue(*, user, task: Task, prompt: str) -> Task:
    """Queue the next turn of a terminal task with a new prompt.

    The row is locked first, so of two concurrent continuations exactly one succeeds; the
    other finds the task queued and gets a ConflictError.
    """
    text_require(prompt, field="prompt", max_chars=PROMPT_MAX_CHARS)
    task = Task.objects.select_for_update().get(pk=task.pk)
    if not task.is_terminal:
        raise ConflictError(f"Only a finished task can be continued; this one is {task.status}.")
    task.status = TaskStatus.QUEUED
    task.turn += 1
    task.continuation_prompt = prompt
    task.is_resume = False
    task.worker_id = ""
    task.heartbeat_at = None
    task.started_at = None
    task.finished_at = None
    task.failure_reason = ""
    task.queued_at = timezone.now()
    task.save()
    audit_record(
        action="task_continued",
        actor=user,
        target_type="task",
        target_id=task.pk,
        data={"turn": task.turn},
    )
    return task


@transaction.atomic
def followup_create(
    *, user, task: Task, message: str, from_task_id: int | None = None
) -> TaskFollowup:
    """Deliver a message to `task`, optionally from another task the user can see."""
    text_require(message, field="message", max_chars=MESSAGE_MAX_CHARS)
    from_task = None
    if from_task_id is not None:
        from_task = tasks_visible_to(user).filter(pk=from_task_id).first()
        if from_task is None:
            raise DomainError("No task with this id.", field="from_task_id")
        if from_task.pk == task.pk:
            raise DomainError("A task cannot send a message to itself.", field="from_task_id")
    followup = TaskFollowup.objects.create(
        task=task, from_task=from_task, message=message, created_by=user
    )
    audit_record(
        action="followup_created",
        actor=user,
        target_type="task",
        target_id=task.pk,
        data={"followup_id": followup.pk, "from_task_id": from_task_id},
    )
    return followup


# A filter of what an agent wrote in a task (its result, its failure reason), for readers
# other than the task's user. Apps register theirs (automemory takes out the user's private
# notes), so the host never imports the apps that plug into it.
TaskTextFilter = Callable[[Task, str], str]
_task_text_filters: list[TaskTextFilter] = []


def task_text_filter_register(text_filter: TaskTextFilter) -> None:
    """Apply `text_filter` to what agents wrote whenever someone else reads a task."""
    if text_filter not in _task_text_filters:
        _task_text_filters.append(text_filter)


def task_text_for(*, task: Task, viewer, text: str) -> str:
    """`text` an agent wrote in `task`, as `viewer` may read it: whole for the task's user,
    through the registered filters for anyone else."""
    if not text or getattr(viewer, "pk", None) == task.user_id:
        return text
    for text_filter in _task_text_filters:
        text = text_filter(task, text)
    return text


# The memories an app put in front of a task's first turn, as ids in order (automemory's
# injection keeps them in its own table). The app registers its reader, so the host never
# imports it; with none registered, a task received none.
TaskInjectedIdsReader = Callable[[Task], list[int]]
_task_injected_ids_readers: list[TaskInjectedIdsReader] = []


def task_injected_ids_reader_register(reader: TaskInjectedIdsReader) -> None:
    """Read the ids of the memories injected into a task with `reader`."""
    if reader not in _task_injected_ids_readers:
        _task_injected_ids_readers.append(reader)


def task_injected_memory_ids(task: Task) -> list[int]:
    """The ids of the memories injected into `task`'s first turn, in order, without repeats."""
    ids = (pk for reader in _task_injected_ids_readers for pk in reader(task))
    return list(dict.fromkeys(ids))
