"""Request hygiene that runs before Django's own middleware, and response headers."""

import re

from django.conf import settings

# Django's session keys are 32 characters of [a-z0-9] (get_random_string's default set).
SESSION_KEY = re.compile(r"[a-z0-9]{8,64}")


def malformed_session_cookie_middleware(get_response):
    """Drop a session cookie that cannot be a session key.

    Django's database session store looks the cookie up as given; on PostgreSQL a value
    with a NUL character makes that query fail (a 500). Without the cookie the request is
    simply anonymous.
    """

    def middleware(request):
        name = settings.SESSION_COOKIE_NAME
        value = request.COOKIES.get(name)
        if value is not None and not SESSION_KEY.fullmatch(value):
            del request.COOKIES[name]
        return get_response(request)

    return middleware


def permissions_policy_middleware(get_response):
    """Send `settings.PERMISSIONS_POLICY` (the browser features no page may use) with every
    response that has none of its own."""

    def middleware(request):
        response = get_response(request)
        policy = getattr(settings, "PERMISSIONS_POLICY", "")
        if policy:
            response.headers.setdefault("Permissions-Policy", policy)
        return response

    return middleware
