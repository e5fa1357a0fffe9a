"""Request rates, per user and per client address, with DRF's throttles (docs/api.md).

DRF runs throttles after authentication and permissions, so a bad token (401) or a request
without credentials (401 from the permission check) would never reach one. Those are
counted earlier, while the request is authenticated:

- `failed_auth`: a token that does not authenticate counts against the client address;
  once over the rate, every token request from that address gets 429 (even a right key,
  so guessing learns nothing) until the window frees a slot. See `TokenAuthentication`.
- `anon`: a request no authentication class accepted counts against the client address
  (`AnonymousRateAuthentication`, the last authentication class).
- `user`: an authenticated request counts against its user (a default throttle class).
- `run` / `run_force`: `POST /users/me/auto-memory/run` per user, and stricter when the
  body asks for `force`.

Rates (`N/s|m|h|d`) come from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], read per request so
settings overrides apply; a scope with no (or an empty) rate is not throttled. Counters live
in Django's cache: with several API processes it must be a shared one (`CACHE_URL`, e.g.
Redis). The client address is REMOTE_ADDR, or the one `NUM_PROXIES` trusted proxies put in
X-Forwarded-For.

When the cache cannot be reached (Redis stopped, or slower than its socket timeout),
throttling fails open: every request is let through unthrottled, authentication and access
rules applying as ever, with one warning per outage in the log and each such request counted
(`controlplane_throttle_cache_failures`). A cache outage must not take the API down, and the
keys are too long to guess in the meantime (docs/operations.md, Faults).
"""

import logging
import math
import threading
import time

import redis
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions, serializers, throttling
from rest_framework.authentication import BaseAuthentication
from rest_framework.settings import api_settings

from controlplane import metrics

logger = logging.getLogger(__name__)

# What a cache that cannot be reached raises: Redis's errors, or a socket's.
CACHE_ERRORS = (redis.exceptions.RedisError, OSError)

# Routes (URL names) of the auto memory run endpoint, throttled by `run` and `run_force`.
RUN_ROUTE_NAMES = frozenset({"auto-memory-run"})


class _CacheOutage:
    """One warning when the throttle cache becomes unreachable, one line when it is back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        metrics.throttle_cache_failures.inc()
        with self._lock:
            if self.since is not None:
                return
            self.since = time.monotonic()
        logger.warning(
            "throttle cache unreachable (%s: %s); requests pass unthrottled until it is back",
            type(exc).__name__,
            exc,
        )

    def ok(self) -> None:
        if self.since is None:
            return
        with self._lock:
            since, self.since = self.since, None
        if since is not None:
            logger.warning("throttle cache reachable again after %.1fs", time.monotonic() - since)


cache_outage = _CacheOutage()


class _RateFromSettings(throttling.SimpleRateThrottle):
    """Reads its rate at each request (DRF binds THROTTLE_RATES once, at import); lets the
    request through when the cache cannot be reached (fails open)."""

    def allow_request(self, request, view) -> bool:
        self.history = None  # read from the cache by DRF, unless the request is not counted
        try:
            allowed = super().allow_request(request, view)
        except CACHE_ERRORS as exc:
            cache_outage.failed(exc)
            return True
        if self.history is not None:
            cache_outage.ok()
        return allowed

    @staticmethod
    def timer() -> float:
        return time.time()  # looked up per call, so a frozen clock in tests applies

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope) or None

    def wait(self) -> float | None:
        """Seconds until a slot frees: when the oldest request still counted leaves the window."""
        if not self.history or len(self.history) < self.num_requests:
            return None
        oldest_counted = self.history[self.num_requests - 1]
        return max(1, math.ceil(oldest_counted + self.duration - self.now))


class UserThrottle(_RateFromSettings):
    """Authenticated requests, per user (anonymous ones are counted at authentication)."""

    scope = "user"

    def get_cache_key(self, request, view) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class MemoryToolThrottle(_RateFromSettings):
    """The memory tool's calls, per task (`memory_tool`), in the same cache as the API's
    counters (automemory.services.memory_tools also counts each call against its user's
    `user` rate)."""

    scope = "memory_tool"

    def __init__(self, *, task_id: int) -> None:
        self.task_id = task_id
        super().__init__()

    def get_cache_key(self, request, view) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.task_id}


class RunThrottle(UserThrottle):
    """`POST /users/me/auto-memory/run`, per user."""

    scope = "run"

    def get_cache_key(self, request, view) -> str | None:
        if request.method != "POST" or _url_name(request) not in RUN_ROUTE_NAMES:
            return None
        return super().get_cache_key(request, view)


class RunForceThrottle(RunThrottle):
    """`POST /users/me/auto-memory/run` with `force` true, per user."""

    scope = "run_force"

    def get_cache_key(self, request, view) -> str | None:
        key = super().get_cache_key(request, view)
        if key is None or not _asks_force(request):
            return None
        return key


class AddressThrottle(_RateFromSettings):
    """Counts per client address; `check` and `record` are separate so only some requests count."""

    def get_cache_key(self, request, view=None) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def check(self, request) -> None:
        """Raise `Throttled` (429 with Retry-After) when the address is over the rate."""
        if self.rate is None:
            return
        try:
            self._load(request)
        except CACHE_ERRORS as exc:
            cache_outage.failed(exc)
            return
        cache_outage.ok()
        if len(self.history) >= self.num_requests:
            raise exceptions.Throttled(wait=self.wait())

    def record(self, request) -> None:
        if self.rate is None:
            return
        try:
            self._load(request)
            self.history.insert(0, self.now)
            self.cache.set(self.key, self.history, self.duration)
        except CACHE_ERRORS as exc:
            cache_outage.failed(exc)

    def _load(self, request) -> None:
        self.key = self.get_cache_key(request)
        self.now = self.timer()
        self.history = [
            moment for moment in self.cache.get(self.key, []) if moment > self.now - self.duration
        ]


class FailedAuthThrottle(AddressThrottle):
    scope = "failed_auth"


class AnonThrottle(AddressThrottle):
    scope = "anon"


class AnonymousRateAuthentication(BaseAuthentication):
    """The last authentication class: reached only by requests nothing authenticated.

    It authenticates nobody; it counts the request against its address (`anon`) and answers
    429 once the address is over the rate, before the permission check's 401.
    """

    def authenticate(self, request):
        throttle = AnonThrottle()
        throttle.check(request)
        throttle.record(request)
        return None


class AnonymousRateAuthenticationScheme(OpenApiAuthenticationExtension):
    """Not a way to authenticate: nothing about it in the schema."""

    target_class = AnonymousRateAuthentication
    name = []

    def get_security_requirement(self, auto_schema):
        return None

    def get_security_definition(self, auto_schema):
        return []


def _url_name(request) -> str | None:
    match = getattr(request, "resolver_match", None)
    return match.url_name if match else None


def _asks_force(request) -> bool:
    """Whether the body's `force` is true. A body that does not parse raises here, as it would
    in the view (400, 413 or 415)."""
    data = request.data
    if not isinstance(data, dict) or "force" not in data:
        return False
    try:
        return serializers.BooleanField().to_internal_value(data["force"])
    except serializers.ValidationError:
        return False
