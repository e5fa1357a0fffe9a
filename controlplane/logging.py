"""Log context (worker and task ids on every line) and the plain and JSON formatters.

The worker loop binds `worker_id` for its whole run and `task_id` around each task with
`log_context`; `LogContextFilter`, installed on the console handler, copies them onto every
record that passes, whichever module logged it. A thread started with `context_thread`
keeps the ids of the code that started it.

`LOG_FORMAT=json` (settings) writes one JSON object a line with `JsonFormatter`; the default
`PlainFormatter` writes `time LEVEL logger [worker=... task=...]: message`.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MappingProxyType

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

CONTEXT_FIELDS = ("worker_id", "task_id")

_EMPTY = MappingProxyType({})
_log_context: contextvars.ContextVar[MappingProxyType] = contextvars.ContextVar(
    "log_context", default=_EMPTY
)


@contextmanager
def log_context(**values: object) -> Iterator[None]:
    """Add `values` (e.g. `worker_id`, `task_id`) to every record logged inside the block."""
    token = _log_context.set(MappingProxyType({**_log_context.get(), **values}))
    try:
        yield
    finally:
        _log_context.reset(token)


def log_context_get() -> dict[str, object]:
    return dict(_log_context.get())


def context_thread(*, target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread running `target` with the caller's log context (threads start empty)."""
    context = contextvars.copy_context()
    return threading.Thread(target=context.run, args=(target,), name=name, daemon=True)


class LogContextFilter(logging.Filter):
    """Sets `worker_id` and `task_id` on each record (None outside a worker or a task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _log_context.get()
        for name in CONTEXT_FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, context.get(name))
        return True


class AccessLineFilter(logging.Filter):
    """On runserver's access log: drops the line of a 4xx or 5xx response.

    `django.request` already logged that response (with its status), so each one is logged
    once; the access line of every other response stays.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status_code = getattr(record, "status_code", None)
        return not (isinstance(status_code, int) and status_code >= 400)


class PlainFormatter(logging.Formatter):
    """`time LEVEL logger [worker=w1 task=7]: message`; the brackets only when ids are known."""

    default_format = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"

    def __init__(self, fmt: str | None = None, **kwargs) -> None:
        super().__init__(fmt or self.default_format, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        labels = {"worker_id": "worker", "task_id": "task"}
        parts = [
            f"{label}={value}"
            for name, label in labels.items()
            if (value := getattr(record, name, None)) is not None
        ]
        copy = logging.makeLogRecord(record.__dict__)
        copy.context = f" [{' '.join(parts)}]" if parts else ""
        return super().formatMessage(copy)


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object a line: time, level, logger, message, worker_id, task_id and extras."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("fmt", ["asctime", "levelname", "name", "message", *CONTEXT_FIELDS])
        kwargs.setdefault("rename_fields", {"asctime": "time", "levelname": "level"})
        kwargs.setdefault("json_default", str)
        super().__init__(**kwargs)
