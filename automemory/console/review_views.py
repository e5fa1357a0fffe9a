"""Console pages for feedback and consent: a project's "Needs review" list (for its owners),
reporting a memory that misled (anyone who can read it), and sharing a memory held for its
author (that author only).

The rules are the API's: access through `controlplane.access`, input through the API's
serializers, writes through `automemory.services.feedback` and `automemory.services.sharing`.
"""

import math

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automemory import selectors
from automemory.api.serializers import ReportInputSerializer
from automemory.console import settings_fields
from automemory.console.views import access_get
from automemory.models import FeedbackVia, ReportReason
from automemory.services.citations import revalidation
from automemory.services.feedback import memory_report
from automemory.services.sharing import memory_share
from controlplane.access import (
    APPROVE_MEMORY,
    memory_get_for_change,
    memory_get_for_read,
    project_get_for,
)
from controlplane.api.throttling import UserThrottle
from controlplane.errors import DomainError, NotFoundError
from controlplane.models import MemoryVisibility
from controlplane.services.mirrors import MirrorError

REVIEW_PAGE_SIZE = 25


def next_url(request: HttpRequest, default: str) -> str:
    """Where a form sends the user back to: its `next` field when it is a console path of
    this site, else `default`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target.startswith("/console/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


@require_GET
@login_required
def project_review(request: HttpRequest, project_id: str) -> HttpResponse:
    """The project's memories held for review, each with who holds it (the people and tasks
    whose reports are open, with their reasons) and all its reports (the reporting task or
    person, the reason, the redacted note, whether it is a repeat), and Approve, Edit and
    Delete. Project owners only (403 for other
    members, 404 for strangers)."""
    project = access_get(
        project_get_for, user=request.user, project_id=project_id, action=APPROVE_MEMORY
    )
    queue = selectors.review_queue_list(project=project, user=request.user)
    page_obj = Paginator(queue, REVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    # Memories whose cited code changed: the old and new lines side by side.
    code_changed = revalidation.stale_memories(project_id=project.pk)
    return render(
        request,
        "console/project_review.html",
        {
            "project": project,
            "page_obj": page_obj,
            "code_changed": code_changed,
            "here": request.get_full_path(),
        },
    )


@require_POST
@login_required
def memory_code_decide(request: HttpRequest, memory_id: str, decision: str) -> HttpResponse:
    """An owner's answer for a memory whose cited code changed: `keep` (it still holds: its
    citations follow the new code) or `retire` (archived). Owners of its project only."""
    memory = access_get(memory_get_for_change, user=request.user, memory_id=memory_id)
    access_get(
        project_get_for, user=request.user, project_id=memory.project_id, action=APPROVE_MEMORY
    )
    back = next_url(request, reverse("console:project_review", args=[memory.project_id]))
    try:
        if decision == revalidation.KEEP:
            revalidation.memory_code_keep(user=request.user, memory=memory)
            messages.success(request, "Kept: its citations now point at the new code.")
        else:
            revalidation.memory_code_retire(user=request.user, memory=memory)
            messages.success(request, "Retired: the memory is archived (it can be restored).")
    except MirrorError as error:
        messages.error(request, f"The repository cannot be read now: {error}")
    return redirect(back)


def _report_context(memory, *, reason: str = "", note: str = "", errors=None) -> dict:
    return {
        "memory": memory,
        "reasons": ReportReason.choices,
        "report_reason": reason,
        "report_note": note,
        "report_errors": errors or {},
        "back_url": reverse("console:memory", args=[memory.pk]),
    }


@require_http_methods(["GET", "POST"])
@login_required
def memory_report_page(request: HttpRequest, memory_id: str) -> HttpResponse:
    """Report a memory that misled (wrong, outdated, unsafe, with a note): it is held out of
    injection and search until a project owner reviews it. Anyone who can read it may; a
    stranger gets 404. The form is also on the memory's page."""
    memory = access_get(memory_get_for_read, user=request.user, memory_id=memory_id)
    if request.method == "GET":
        return render(request, "console/memory_report.html", _report_context(memory))
    throttle = UserThrottle()
    if not throttle.allow_request(request, None):
        # The API's per-user rate, on the same counter: the console is not a way around it.
        wait = math.ceil(throttle.wait() or 1)
        messages.error(request, f"Too many requests lately. Try again in {wait} seconds.")
        context = _report_context(memory)
        response = render(request, "console/memory_report.html", context, status=429)
        response["Retry-After"] = str(wait)
        return response
    data = {"reason": request.POST.get("reason", ""), "note": request.POST.get("note", "")}
    serializer = ReportInputSerializer(data=data)
    status = 400
    if serializer.is_valid():
        try:
            memory_report(
                memory=memory,
                reason=serializer.validated_data["reason"],
                note=serializer.validated_data.get("note", ""),
                user=request.user,
                via=FeedbackVia.PERSON,
            )
        except NotFoundError as gone:  # deleted meanwhile
            raise Http404(gone.message) from gone
        except DomainError as error:
            # Reported already (400), or over the person's reports this hour (429).
            errors = {error.field or "reason": [error.message]}
            status = error.status_code
        else:
            messages.success(
                request,
                "Reported. New tasks do not receive this memory, and searches do not find "
                "it, until a project owner reviews it.",
            )
            return redirect("console:memory", memory.pk)
    else:
        errors = {
            name: settings_fields.error_messages(found) for name, found in serializer.errors.items()
        }
    context = _report_context(memory, reason=data["reason"], note=data["note"], errors=errors)
    return render(request, "console/memory_report.html", context, status=status)


@require_POST
@login_required
def memory_share_action(request: HttpRequest, memory_id: str) -> HttpResponse:
    """Share a memory held for its author with the project (the author only; for anyone else
    it does not exist: 404)."""
    memory = access_get(memory_get_for_change, user=request.user, memory_id=memory_id)
    if memory.visibility != MemoryVisibility.AUTHOR or memory.created_by_id != request.user.pk:
        messages.error(request, "Only a memory held for you can be shared, by you.")
        return redirect("console:memory", memory.pk)
    try:
        memory_share(user=request.user, memory=memory)
    except NotFoundError as gone:  # deleted meanwhile
        raise Http404(gone.message) from gone
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(
            request, "Shared: the project's members see this memory, and their tasks get it."
        )
    return redirect("console:memory", memory.pk)
