"""Password sign-ins (the admin's and the console's): the per-username slow-down's plumbing.

`SignInSlowdownMiddleware` answers a sign-in POST for a slowed username with 429 and
`Retry-After`, before the view (so before any password check); `SignInGate` (django-axes'
backend, first of AUTHENTICATION_BACKENDS) marks the requests it let through to the password
check, so only those count as failures (`sign_in_failed`, on Django's `user_login_failed`).
The rules are in controlplane.services.sign_in_locks.
"""

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_client_ip_address
from django.http import HttpResponse

from controlplane.api.throttling import CACHE_ERRORS, cache_outage
from controlplane.services.sign_in_locks import (
    sign_in_failure_record,
    sign_in_slowdown_check,
    sign_in_success_record,
    sign_in_turn_release,
)

# The views whose POST is a password sign-in (Django's AuthenticationForm: `username`).
SIGN_IN_VIEWS = frozenset({"admin:login", "console:sign-in"})


class SignInGate(AxesStandaloneBackend):
    """django-axes' gate (raises while the username is locked from this address); when it lets
    the attempt through, notes on the request that the next backend checks the password."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        super().authenticate(request, username=username, password=password, **kwargs)
        if request is not None:
            request.sign_in_password_checked = True


class SignInSlowdownMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        username = getattr(request, "sign_in_turn", None)
        if username is not None:
            try:
                sign_in_turn_release(username=username)
            except CACHE_ERRORS as exc:
                cache_outage.failed(exc)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in SIGN_IN_VIEWS:
            return None
        username = request.POST.get("username", "")
        if not username:
            return None
        try:
            answer = sign_in_slowdown_check(
                username=username, ip_address=get_client_ip_address(request)
            )
        except CACHE_ERRORS as exc:
            cache_outage.failed(exc)  # as the throttles: a cache outage lets sign-ins through
            return None
        if answer.turn:
            request.sign_in_turn = username
        if not answer.wait:
            return None
        response = HttpResponse(
            f"Too many failed sign-ins for this user name. Try again in {answer.wait} seconds.\n",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = str(answer.wait)
        return response


def sign_in_failed(sender, credentials=None, request=None, **kwargs) -> None:
    """Count a failed sign-in against its username, when its password was checked (not when
    django-axes or the slow-down refused it before the check)."""
    if request is None or not getattr(request, "sign_in_password_checked", False):
        return
    username = (credentials or {}).get("username")
    if not username:
        return
    try:
        sign_in_failure_record(username=username)
    except CACHE_ERRORS as exc:
        cache_outage.failed(exc)


def sign_in_succeeded(sender, request=None, user=None, **kwargs) -> None:
    if request is None or user is None or not getattr(request, "sign_in_password_checked", False):
        return
    try:
        sign_in_success_record(
            username=user.get_username(), ip_address=get_client_ip_address(request)
        )
    except CACHE_ERRORS as exc:
        cache_outage.failed(exc)
