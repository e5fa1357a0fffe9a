"""Console pages of the frame: home, sign-in/out, the user's settings, the log and Run now.

Views stay thin: they read with the API's selectors, validate with the API's serializers and
write through the API's services, so a page and an endpoint can never disagree.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from rest_framework.exceptions import NotFound, PermissionDenied

from automemory.services.preferences import settings_get
from controlplane.access import projects_visible_to

T = TypeVar("T")


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
    """Sign in with the Django user's password (session auth, CSRF-protected form)."""

    template_name = "console/sign_in.html"
    redirect_authenticated_user = True


class SignOutView(auth_views.LogoutView):
    """Sign out (POST only, as Django's LogoutView) and go back to the sign-in page."""

    next_page = "console:sign-in"


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The console's start page: the user's projects and their auto memory switches."""
    projects = projects_visible_to(request.user).order_by("name", "pk")[:20]
    return render(
        request,
        "console/home.html",
        {"projects": projects, "settings": settings_get(user_id=request.user.pk)},
    )


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """The user's auto memory settings (filled in below)."""
    return render(request, "console/settings.html", {})


@login_required
def log_page(request: HttpRequest) -> HttpResponse:
    """The user's extraction log (filled in below)."""
    return render(request, "console/log.html", {})


@login_required
def run_now(request: HttpRequest) -> HttpResponse:
    """Run the sweep now (filled in below)."""
    return render(request, "console/run_result.html", {})
