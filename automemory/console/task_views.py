"""The console's task page: prompt, turns and status, the memories its first turn received,
the memory it produced and why, and its auto memory flags."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from automemory import selectors
from automemory.console.explanations import reason_explanation
from automemory.console.forms import TaskFlagsForm, flag_choice
from automemory.console.views import access_get
from automemory.services.preferences import effective_switch, flags_get, flags_set, settings_get
from controlplane.access import CREATE_TASK, READ, project_role, role_allows, task_get_for
from controlplane.models import Task
from controlplane.selectors import task_diff_get
from controlplane.services.tasks import task_text_for

# The lines of a task's diff its page shows (the API's `/tasks/{id}/diff` has all it keeps).
DIFF_LINES_SHOWN = 3000


def _diff_lines(text: str) -> tuple[list[tuple[str, str]], int]:
    """The diff's first DIFF_LINES_SHOWN lines, each with its kind (file, hunk, added,
    removed, context) for the page's colours, and how many lines were left out."""
    lines = text.splitlines()
    shown = []
    for line in lines[:DIFF_LINES_SHOWN]:
        if line.startswith("diff --git "):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+") and not line.startswith("+++ "):
            kind = "added"
        elif line.startswith("-") and not line.startswith("--- "):
            kind = "removed"
        else:
            kind = "context"
        shown.append((kind, line))
    return shown, max(0, len(lines) - DIFF_LINES_SHOWN)


def _code_context(task: Task) -> dict:
    """What the page shows of the task's repository work: nothing for a task without one."""
    if not task.branch:
        return {}
    diff = task_diff_get(task=task)
    lines, left_out = _diff_lines(diff.diff) if diff else ([], 0)
    return {
        "diff": diff,
        "diff_lines": lines,
        "diff_lines_left_out": left_out,
        "task_branch": f"controlplane/task-{task.pk}",
    }


def _task_context(request: HttpRequest, task: Task, flags_form: TaskFlagsForm | None) -> dict:
    flags = flags_get(task_id=task.pk)
    prefs = settings_get(user_id=task.user_id)
    if flags_form is None:
        flags_form = TaskFlagsForm(
            initial={
                "use_memories": flag_choice(flags.use_memories),
                "generate_memories": flag_choice(flags.generate_memories),
            }
        )
    role = project_role(user=request.user, project_id=task.project_id)
    page = selectors.task_page_get(user=request.user, task=task)
    return {
        "task": task,
        "page": page,
        "reason_explanation": reason_explanation(page.log.reason) if page.log else "",
        "role": role,
        "can_set_flags": role_allows(role, CREATE_TASK),
        "flags": flags,
        "flags_form": flags_form,
        "effective_use_memories": effective_switch(flags.use_memories, prefs.use_memories),
        "effective_generate_memories": effective_switch(
            flags.generate_memories, prefs.generate_memories
        ),
        "owner_settings": prefs,
        "is_own_task": task.user_id == request.user.pk,
        # What the agent wrote, as this reader may see it (the user's private notes out).
        "result_text": task_text_for(task=task, viewer=request.user, text=task.result_text),
        "failure_reason": task_text_for(task=task, viewer=request.user, text=task.failure_reason),
        **_code_context(task),
    }


@require_GET
@login_required
def task_detail(request: HttpRequest, task_id: str) -> HttpResponse:
    """A task as its project's members see it (a stranger gets 404)."""
    task = access_get(task_get_for, user=request.user, task_id=task_id, action=READ)
    return render(request, "console/task.html", _task_context(request, task, None))


@require_POST
@login_required
def task_flags(request: HttpRequest, task_id: str) -> HttpResponse:
    """Set the task's auto memory flags (create_task permission, as the API)."""
    task = access_get(task_get_for, user=request.user, task_id=task_id, action=CREATE_TASK)
    form = TaskFlagsForm(request.POST)
    if not form.is_valid():
        context = _task_context(request, task, form)
        return render(request, "console/task.html", context, status=400)
    try:
        flags_set(task=task, actor=request.user, changes=form.changes())
    except ValidationError as refused:
        for name, errors in refused.message_dict.items():
            form.add_error(name, errors)
        return render(request, "console/task.html", _task_context(request, task, form), status=400)
    messages.success(request, "Auto memory flags saved for this task.")
    return redirect("console:task", task.pk)
