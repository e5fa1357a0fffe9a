"""Living through a database outage: one warning per outage, and retries with back-off.

A worker's threads (the rounds, each task's heartbeat, stale task recovery, the sweeper)
each keep an `Outage`: the first connection error logs one line (no traceback), the ones
after it nothing, and the first success after it says how long the database was gone.
Any other exception is a bug and keeps its traceback.

`retry_while_unreachable` repeats one step (the finish of a turn whose agent already ran,
the preparation of a claimed task) while the database is unreachable, with back-off, for a
bounded time. Between attempts Django's own `close_old_connections` drops the broken
connection (`CONN_HEALTH_CHECKS` checks a reused one), so the next attempt reconnects.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, close_old_connections, connection

T = TypeVar("T")

CONNECTION_ERRORS = (OperationalError, InterfaceError)


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` is the database being unreachable (refused, cut, shutting down)."""
    return isinstance(exc, CONNECTION_ERRORS)


def refresh_connections() -> None:
    """Drop broken or expired connections of this thread, as Django does between requests.

    Never inside an atomic block: the caller's transaction (a test's) owns the connection.
    """
    if not connection.in_atomic_block:
        close_old_connections()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class Outage:
    """What one activity (`what`) logs of database outages: one warning when it starts, one
    line when it ends; failures that are not the database's keep their traceback."""

    def __init__(self, what: str, *, logger: logging.Logger) -> None:
        self.what = what
        self.logger = logger
        self.since: float | None = None
        self.failures = 0

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException, *, retrying: str = "retrying") -> None:
        """Record a failed attempt: a warning at the start of an outage, a traceback for an
        error that is not a connection error, nothing else."""
        if not is_connection_error(exc):
            self.logger.error("%s failed; %s", self.what, retrying, exc_info=exc)
            return
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            self.logger.warning(
                "%s: database unreachable (%s); %s until it is back",
                self.what,
                _first_line(exc),
                retrying,
            )

    def ok(self) -> None:
        """Record a success: ends an outage, logging how long it lasted."""
        if self.since is None:
            return
        self.logger.info(
            "%s: database reachable again after %.1fs (%d failed attempts)",
            self.what,
            time.monotonic() - self.since,
            self.failures,
        )
        self.since = None
        self.failures = 0


class GaveUp(Exception):
    """`retry_while_unreachable` stopped: its time ran out, or `should_stop` said so."""


def retry_while_unreachable(
    action: Callable[[], T],
    *,
    outage: Outage,
    seconds: float,
    should_stop: Callable[[], bool] = lambda: False,
    first_delay: float = 0.25,
    max_delay: float = 2.0,
    on_retry: Callable[[], None] = lambda: None,
    retrying: str = "retrying",
) -> T:
    """`action()`, repeated while it fails on a connection error, `first_delay` doubling up to
    `max_delay` (with a little jitter) between attempts, for up to `seconds` in all.

    Any other exception is raised at once. Raises `GaveUp` (from the last connection error)
    when the time is up or `should_stop()` turns true; `on_retry` runs before each retry.
    `retrying` says in the outage's warning what happens meanwhile.
    """
    deadline = time.monotonic() + seconds
    delay = first_delay
    while True:
        try:
            result = action()
        except CONNECTION_ERRORS as exc:
            outage.failed(exc, retrying=retrying)
            left = deadline - time.monotonic()
            if left <= 0 or should_stop():
                raise GaveUp(f"{outage.what}: gave up after {seconds:g}s") from exc
            pause = min(delay * random.uniform(0.8, 1.2), left)
            _sleep(pause, should_stop)
            if should_stop():
                raise GaveUp(f"{outage.what}: stopped") from exc
            delay = min(delay * 2, max_delay)
            refresh_connections()
            on_retry()
            continue
        outage.ok()
        return result


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not should_stop():
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))
