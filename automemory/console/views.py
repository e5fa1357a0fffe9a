"""Console pages of the frame: home, sign-in/out, the user's settings, the log and Run now.

Views stay thin: they read with the API's selectors, validate with the API's serializers and
write through the API's services, so a page and an endpoint can never disagree.
"""

import math
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views import defaults
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from rest_framework.exceptions import NotFound, PermissionDenied, Throttled

from automemory import selectors
from automemory.api.serializers import (
    AutoMemoryLogFilterInput,
    AutoMemorySettingsSerializer,
    RunSummarySerializer,
)
from automemory.console import settings_fields
from automemory.console.explanations import REASON_EXPLANATIONS, reason_explanation
from automemory.models import Outcome, Reason
from automemory.services.extraction.sweep import SweepBusy, process_auto_memories
from automemory.services.preferences import SETTINGS_FIELDS, settings_get, settings_update
from controlplane.access import projects_visible_to
from controlplane.api.throttling import FailedAuthThrottle, UserThrottle

T = TypeVar("T")
# The home page lists this many projects; the Projects page has them all.
HOME_PROJECTS = 20


def access_get(getter: Callable[..., T], **kwargs: Any) -> T:
    """Call an access getter of `controlplane.access`, turning its API errors into page errors.

    A stranger's 404 stays a 404; a member without the permission gets Django's 403.
    """
    try:
        return getter(**kwargs)
    except NotFound as exc:
        raise Http404(str(exc.detail)) from exc
    except PermissionDenied as exc:
        raise DjangoPermissionDenied(str(exc.detail)) from exc


class SignInView(auth_views.LoginView):
    """Sign in with the Django user's password (session auth, CSRF-protected form).

    Failed sign-ins count against the client address on the API's `failed_auth` counter (bad
    tokens count there too): over the rate, the address gets 429 without a password check.
    """

    template_name = "console/sign_in.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        try:
            FailedAuthThrottle().check(request)
        except Throttled as refused:
            wait = math.ceil(refused.wait or 1)
            context = self.get_context_data(
                form=self.form_class(request),
                refused=f"Too many failed sign-ins from your address. Try again in {wait} seconds.",
            )
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        FailedAuthThrottle().record(self.request)
        return super().form_invalid(form)


class SignOutView(auth_views.LogoutView):
    """Sign out (POST only, as Django's LogoutView) and go back to the sign-in page."""

    next_page = "console:sign-in"


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The console's start page: the user's projects and their auto memory switches."""
    projects = projects_visible_to(request.user).order_by("name", "pk")[:HOME_PROJECTS]
    outcome_counts = dict(
        selectors.auto_memory_log_list(user=request.user)
        .order_by()
        .values_list("outcome")
        .annotate(count=Count("pk"))
    )
    return render(
        request,
        "console/home.html",
        {
            "projects": projects,
            "more_projects": len(projects) == HOME_PROJECTS,
            "settings": settings_get(user_id=request.user.pk),
            "outcomes": [
                {"value": value, "label": label, "count": outcome_counts.get(value, 0)}
                for value, label in Outcome.choices
            ],
        },
    )


LOG_PAGE_SIZE = 25


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    """The user's auto memory settings: validated by the API's serializer, saved by the API's
    service (which rechecks the tasks skipped under the old settings)."""
    current = settings_get(user_id=request.user.pk)
    values = {name: getattr(current, name) for name in SETTINGS_FIELDS}
    errors: dict[str, list[str]] = {}
    status = 200
    if request.method == "POST":
        data = settings_fields.settings_data_from_post(request.POST)
        serializer = AutoMemorySettingsSerializer(data=data)
        if serializer.is_valid():
            changes = {
                name: value
                for name, value in serializer.validated_data.items()
                if value != values[name]
            }
            settings_update(user=request.user, changes=changes)
            if changes:
                messages.success(request, f"Saved: {', '.join(sorted(changes))}.")
            else:
                messages.info(request, "Nothing changed; skipped tasks will be looked at again.")
            return redirect("console:settings")
        errors = {
            name: settings_fields.error_messages(found) for name, found in serializer.errors.items()
        }
        values = {**values, **data}
        status = 400
    fields = [
        {
            "spec": spec,
            "value": settings_fields.settings_form_value(spec, values[spec.name]),
            "errors": errors.get(spec.name, []),
        }
        for spec in settings_fields.settings_fields()
    ]
    groups: dict[str, list[dict]] = {}
    for field in fields:
        groups.setdefault(field["spec"].group, []).append(field)
    return render(
        request,
        "console/settings.html",
        {
            "groups": groups,
            "errors": errors,
            "other_errors": [
                message
                for name, found in errors.items()
                if name not in SETTINGS_FIELDS
                for message in found
            ],
            "ranking_choices": settings_fields.INJECTION_RANKING_CHOICES,
            "updated_at": current.updated_at,
        },
        status=status,
    )


def _log_filters(query: QueryDict) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The outcome and reason filters as the API validates them; blank means "any"."""
    data = {name: query.get(name, "") for name in ("outcome", "reason")}
    serializer = AutoMemoryLogFilterInput(data={k: v for k, v in data.items() if v})
    if serializer.is_valid():
        return dict(serializer.validated_data), {}
    return {}, {
        name: settings_fields.error_messages(found) for name, found in serializer.errors.items()
    }


@login_required
@require_GET
def log_page(request: HttpRequest) -> HttpResponse:
    """The user's extraction log with outcome and reason filters, explained, newest first."""
    filters, errors = _log_filters(request.GET)
    run_summary = request.session.pop(RUN_SUMMARY_SESSION_KEY, None)
    rows = (
        selectors.auto_memory_log_list(user=request.user)
        .filter(**filters)
        .select_related("task", "task__project")
    )
    page_obj = Paginator(rows, LOG_PAGE_SIZE).get_page(request.GET.get("page"))
    entries = [{"row": row, "explanation": reason_explanation(row.reason)} for row in page_obj]
    return render(
        request,
        "console/log.html",
        {
            "page_obj": page_obj,
            "entries": entries,
            "filters": filters,
            "filter_errors": errors,
            "selected": {name: request.GET.get(name, "") for name in ("outcome", "reason")},
            "outcome_choices": Outcome.choices,
            "reason_choices": Reason.choices,
            "has_any": filters or selectors.auto_memory_log_list(user=request.user).exists(),
            "explanations": REASON_EXPLANATIONS,
            "base_template": "console/_bare.html",
            **(_summary_context(run_summary) if isinstance(run_summary, dict) else {}),
        },
        status=400 if errors else 200,
    )


RUN_SUMMARY_SESSION_KEY = "console_run_summary"


class _RunThrottle(UserThrottle):
    """The API's `run` rate, on the same per-user counter: the console is not a way around it."""

    scope = "run"


class _RunForceThrottle(UserThrottle):
    """The API's `run_force` rate, on the same per-user counter."""

    scope = "run_force"


def _run_wait_seconds(request: HttpRequest, *, force: bool) -> int | None:
    """Seconds until the user may run a sweep again (None: now), counting this request as the
    API counts `POST /users/me/auto-memory/run`."""
    throttles = [_RunThrottle(), *([_RunForceThrottle()] if force else [])]
    waits = [throttle.wait() for throttle in throttles if not throttle.allow_request(request, None)]
    return max((math.ceil(wait or 1) for wait in waits), default=None)


def _summary_context(summary: dict) -> dict:
    skipped = [
        {"reason": reason, "label": Reason(reason).label, "count": count}
        for reason, count in summary["skipped"].items()
        if count and reason in Reason.values
    ]
    return {"summary": summary, "skipped": skipped}


@login_required
@require_POST
def run_now(request: HttpRequest) -> HttpResponse:
    """Run the extraction sweep over the user's tasks now (the API's service), then show the log
    with the sweep's summary on top. `force=1` skips the waiting gates (idle, duration,
    length), as the API's `force`. Post/redirect/get: reloading the log does not sweep again."""
    force, problems = settings_fields.run_force_from_post(request.POST)
    if force is None:
        return render(
            request,
            "console/run_result.html",
            {"base_template": "console/base.html", "problems": problems},
            status=400,
        )
    wait = _run_wait_seconds(request, force=force)
    if wait is not None:
        kind = "forced sweeps" if force else "sweeps"
        response = render(
            request,
            "console/run_result.html",
            {
                "base_template": "console/base.html",
                "problems": [
                    f"You have run too many {kind} lately (the same limit as the API's). "
                    f"Try again in {wait} seconds; the worker's sweep keeps running meanwhile."
                ],
            },
            status=429,
        )
        response["Retry-After"] = str(wait)
        return response
    try:
        summary = process_auto_memories(user=request.user, force=force).as_dict()
    except SweepBusy as busy:
        response = render(
            request,
            "console/run_result.html",
            {
                "base_template": "console/base.html",
                "problems": [
                    "A sweep is working on your tasks right now. Try again in "
                    f"{busy.retry_after} seconds; its results will show in the log."
                ],
            },
            status=409,
        )
        response["Retry-After"] = str(busy.retry_after)
        return response
    request.session[RUN_SUMMARY_SESSION_KEY] = dict(RunSummarySerializer(summary).data)
    return redirect("console:log")


def _console_error(request: HttpRequest, *, status: int, title: str, message: str):
    return render(
        request,
        "console/error.html",
        {"status": status, "title": title, "message": message},
        status=status,
    )


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 page: the console's own under /console/ (with the nav), Django's default elsewhere."""
    if not request.path.startswith("/console/"):
        return defaults.page_not_found(request, exception)
    return _console_error(
        request,
        status=404,
        title="Not found",
        message="There is nothing here, or it belongs to a project you are not a member of.",
    )


def forbidden(request: HttpRequest, exception: Exception) -> HttpResponse:
    """403 page: under /console/ it says which permission the user's role lacks."""
    if not request.path.startswith("/console/"):
        return defaults.permission_denied(request, exception)
    detail = str(exception) if isinstance(exception, DjangoPermissionDenied) else ""
    return _console_error(
        request,
        status=403,
        title="Not allowed",
        message=detail or "Your role in this project does not allow this.",
    )
