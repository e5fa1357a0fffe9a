"""Console pages for memories: a project's memories, one memory, edit, delete, approve, restore,
and the signed-in user's own memories.

Access goes through `controlplane.access` (the API's rules: a stranger gets 404, a viewer
reads, owners and members change); writes go through `controlplane.services.memories`.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automemory import selectors
from automemory.console.forms import (
    MemoryContentForm,
    MemoryEditForm,
    MyMemoryFilterForm,
    ProjectMemoryFilterForm,
    citations_text,
)
from automemory.console.review_views import next_url
from automemory.console.views import access_get
from automemory.models import ReportReason
from automemory.services.memory_state import memory_held_for_review
from controlplane.access import (
    APPROVE_MEMORY,
    CREATE_TASK,
    memory_allows,
    memory_get_for_approve,
    memory_get_for_change,
    memory_get_for_delete,
    object_id_parse,
    project_get_for,
    project_role,
    role_allows,
)
from controlplane.errors import DomainError, NotFoundError
from controlplane.models import IdentityMemory, MemoryScope, MemoryVisibility
from controlplane.selectors import task_list
from controlplane.services import memories as memory_services
from controlplane.services.memories import memory_citations_set
from controlplane.services.memory_citations import citations_read

PAGE_SIZE = 25
# The project page lists this many of its newest tasks (links to their pages).
RECENT_TASKS = 10


def _page(request: HttpRequest, queryset) -> Page:
    """One page of `queryset`; a bad or out-of-range `page` gives the nearest real page."""
    return Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))


def _memory_return_url(memory: IdentityMemory) -> str:
    """Where a memory's page leads back to: its project's memories, or the user's own."""
    if memory.scope == MemoryScope.USER:
        return reverse("console:my_memories")
    return reverse("console:project_memories", args=[memory.project_id])


def _memory_visible(request: HttpRequest, memory_id) -> tuple[IdentityMemory, str | None]:
    """The memory if the user may see it, and their role in its project (None for their own
    user-level memory); 404 otherwise."""
    pk = object_id_parse(memory_id)
    memory = selectors.memory_detail_get(user=request.user, memory_id=pk) if pk else None
    if memory is None:
        raise Http404("Memory not found.")
    if memory.scope == MemoryScope.USER:
        return memory, None
    return memory, project_role(user=request.user, project_id=memory.project_id)


def _may_change(memory: IdentityMemory, *, user, role: str | None) -> bool:
    return memory_allows(memory, user=user, role=role, action=CREATE_TASK)


def _may_approve(memory: IdentityMemory, *, user, role: str | None) -> bool:
    """A held memory (flagged, or reported): a project owner may release it; a user their
    own user-level memory."""
    if not memory_held_for_review(memory):
        return False
    if memory.scope == MemoryScope.USER:
        return memory_allows(memory, user=user, role=None, action=APPROVE_MEMORY)
    return role_allows(role, APPROVE_MEMORY)


def _held_for_author(memory: IdentityMemory, *, user) -> bool:
    """Held for `user` as its author (privacy by consent): theirs to share, edit or delete."""
    return memory.visibility == MemoryVisibility.AUTHOR and memory.created_by_id == user.pk


@require_GET
@login_required
def projects(request: HttpRequest) -> HttpResponse:
    """The user's projects, each with their role and its number of memories."""
    page_obj = _page(request, selectors.console_project_list(user=request.user))
    return render(request, "console/projects.html", {"page_obj": page_obj})


@require_GET
@login_required
def project_memories(request: HttpRequest, project_id: str) -> HttpResponse:
    """A project's memories with filters and search; a bad filter value is a 400."""
    project = access_get(project_get_for, user=request.user, project_id=project_id)
    role = project_role(user=request.user, project_id=project.pk)
    form = ProjectMemoryFilterForm(request.GET)
    page_obj, status, scope = None, 200, MemoryScope.PROJECT
    if form.is_valid():
        filters = form.cleaned_data
        scope = filters["scope"] or MemoryScope.PROJECT
        memories = selectors.console_memory_list(
            user=request.user,
            project=None if scope == MemoryScope.USER else project,
            source=filters["source"] or None,
            status=filters["status"] or None,
            q=filters["q"] or None,
        )
        page_obj = _page(request, memories)
    else:
        status = 400
    context = {
        "project": project,
        "recent_tasks": task_list(user=request.user, project=project)[:RECENT_TASKS],
        "role": role,
        "form": form,
        "page_obj": page_obj,
        "scope": scope,
        "filtered": form.is_valid() and any(form.cleaned_data.values()),
        "can_change": scope == MemoryScope.USER or role_allows(role, CREATE_TASK),
        "can_approve": scope == MemoryScope.PROJECT and role_allows(role, APPROVE_MEMORY),
        "can_review": role_allows(role, APPROVE_MEMORY),
        "review_count": (
            selectors.review_queue_count(project=project, user=request.user)
            if role_allows(role, APPROVE_MEMORY)
            else 0
        ),
        "held_for_me": list(selectors.held_for_me_list(project=project, user=request.user)[:20]),
        "preview": {"prompt": "", "goal": ""},
    }
    # The filter form swaps only the list in place; anything else (a reload, history
    # restore) gets the whole page.
    htmx = getattr(request, "htmx", None)
    partial = bool(htmx) and htmx.target == "memory-list" and not htmx.history_restore_request
    template = (
        "console/_memory_list.html"
        if partial and status == 200
        else "console/project_memories.html"
    )
    response = render(request, template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_GET
@login_required
def memory_detail(request: HttpRequest, memory_id: str) -> HttpResponse:
    """One memory with its provenance (source tasks, what it superseded), its history
    (injected, shown, cited, reported), and the actions the user may take on it."""
    memory, role = _memory_visible(request, memory_id)
    context = {
        "memory": memory,
        "role": role,
        "can_change": _may_change(memory, user=request.user, role=role),
        "can_approve": _may_approve(memory, user=request.user, role=role),
        "held_for_me": _held_for_author(memory, user=request.user),
        "history": selectors.memory_history_get(user=request.user, memory=memory),
        "reasons": ReportReason.choices,
        "back_url": _memory_return_url(memory),
        # The code it cites, as the last check found it (docs/citations.md).
        "citations": citations_read(memory) if memory.project_id is not None else [],
    }
    return render(request, "console/memory_detail.html", context)


@require_http_methods(["GET", "POST"])
@login_required
def memory_edit(request: HttpRequest, memory_id: str) -> HttpResponse:
    """Edit a memory's text through the service (secret check, instruction re-flagging)."""
    memory = access_get(memory_get_for_change, user=request.user, memory_id=memory_id)
    # A project memory's form also edits the code it cites.
    form_class = MemoryEditForm if memory.project_id is not None else MemoryContentForm
    if request.method == "POST":
        form = form_class(request.POST)
        if form.is_valid():
            try:
                with transaction.atomic():  # the text and the citations, or neither
                    memory_services.memory_update(
                        user=request.user, memory=memory, content=form.cleaned_data["content"]
                    )
                    if "citations" in form.cleaned_data:
                        memory_citations_set(
                            user=request.user,
                            memory=memory,
                            citations=form.cleaned_data["citations"],
                        )
            except NotFoundError as gone:  # deleted meanwhile
                raise Http404(gone.message) from gone
            except DomainError as error:
                form.add_domain_error(error)
            else:
                messages.success(request, "Memory saved.")
                return redirect(next_url(request, reverse("console:memory", args=[memory.pk])))
        status = 400
    else:
        initial = {"content": memory.content}
        if form_class is MemoryEditForm:
            initial["citations"] = citations_text(citations_read(memory))
        form = form_class(initial=initial)
        status = 200
    # A page that sent the user here (`next`, e.g. Needs review) is where they go back to.
    explicit = next_url(request, "")
    back_url = explicit or reverse("console:memory", args=[memory.pk])
    context = {"memory": memory, "form": form, "back_url": back_url, "next": explicit}
    return render(request, "console/memory_edit.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def memory_delete(request: HttpRequest, memory_id: str) -> HttpResponse:
    """Ask for confirmation (GET), then forget the memory for good (POST)."""
    memory = access_get(memory_get_for_delete, user=request.user, memory_id=memory_id)
    if request.method == "POST":
        back_url = next_url(request, _memory_return_url(memory))
        try:
            memory_services.memory_delete(user=request.user, memory=memory)
        except NotFoundError as gone:  # another request deleted it first
            raise Http404(gone.message) from gone
        messages.success(request, "Memory deleted. It will not come back.")
        return redirect(back_url)
    explicit = next_url(request, "")
    back_url = explicit or reverse("console:memory", args=[memory.pk])
    context = {"memory": memory, "back_url": back_url, "next": explicit}
    return render(request, "console/memory_confirm_delete.html", context)


@require_POST
@login_required
def memory_approve(request: HttpRequest, memory_id: str) -> HttpResponse:
    """A project owner lets a flagged or reported memory be injected."""
    memory = access_get(memory_get_for_approve, user=request.user, memory_id=memory_id)
    _memory_change(
        request,
        memory,
        memory_services.memory_approve,
        "Memory approved: new tasks may receive it.",
    )
    return redirect(next_url(request, reverse("console:memory", args=[memory.pk])))


@require_POST
@login_required
def memory_restore(request: HttpRequest, memory_id: str) -> HttpResponse:
    """Bring an archived memory back to active."""
    memory = access_get(memory_get_for_change, user=request.user, memory_id=memory_id)
    _memory_change(
        request, memory, memory_services.memory_restore, "Memory restored: it is active again."
    )
    return redirect("console:memory", memory.pk)


def _memory_change(request: HttpRequest, memory, change, done: str) -> None:
    """`change(user=, memory=)` by the signed-in user: `done` as a message, or the refusal's;
    404 when the memory was deleted meanwhile."""
    try:
        change(user=request.user, memory=memory)
    except NotFoundError as gone:
        raise Http404(gone.message) from gone
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, done)


@require_http_methods(["GET", "POST"])
@login_required
def my_memories(request: HttpRequest) -> HttpResponse:
    """The signed-in user's own user-level memories (only ever theirs), and a form to add one."""
    filter_form = MyMemoryFilterForm(request.GET)
    create_form = MemoryContentForm()
    status = 200
    if request.method == "POST":
        create_form = MemoryContentForm(request.POST)
        if create_form.is_valid():
            try:
                memory_services.memory_create(
                    user=request.user, content=create_form.cleaned_data["content"]
                )
            except DomainError as error:
                create_form.add_domain_error(error)
            else:
                messages.success(request, "Memory added.")
                return redirect("console:my_memories")
        status = 400
    page_obj = None
    if filter_form.is_valid():
        filters = filter_form.cleaned_data
        memories = selectors.console_memory_list(
            user=request.user, status=filters["status"] or None, q=filters["q"] or None
        )
        page_obj = _page(request, memories)
    else:
        status = 400
    context = {
        "filter_form": filter_form,
        "form": create_form,
        "page_obj": page_obj,
        "filtered": filter_form.is_valid() and any(filter_form.cleaned_data.values()),
        "can_change": True,
        "can_approve": False,
    }
    return render(request, "console/my_memories.html", context, status=status)
