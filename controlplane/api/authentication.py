"""Token authentication against hashed API tokens (controlplane.services.tokens).

`Authorization: Token <key>`. A key that is malformed, unknown, expired or revoked is a 401
and counts against the client's address; past the `failed_auth` rate every token request
from that address is a 429 with Retry-After (controlplane.api.throttling). The header is
parsed here, not by DRF's helper, so no header (NUL bytes, non-ASCII, megabytes) can fail
with a 500.
"""

from rest_framework import authentication, exceptions

from controlplane.api.throttling import FailedAuthThrottle
from controlplane.services.tokens import TokenInvalid, token_authenticate

KEYWORD = "Token"


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's scheme and header (so the schema names it), over `ApiToken` instead of authtoken."""

    keyword = KEYWORD

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if isinstance(header, bytes):
            header = header.decode("latin-1")
        scheme, *parts = header.split() or [""]
        if scheme.lower() != self.keyword.lower():
            return None
        throttle = FailedAuthThrottle()
        throttle.check(request)
        try:
            if len(parts) != 1:
                raise TokenInvalid(
                    "Invalid token header. No credentials provided."
                    if not parts
                    else "Invalid token header. Token string should not contain spaces."
                )
            token = token_authenticate(key=parts[0])
        except TokenInvalid as exc:
            throttle.record(request)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return (token.user, token)

    def authenticate_credentials(self, key):
        raise NotImplementedError("authenticate() checks the key")
