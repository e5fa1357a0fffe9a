"""The gates, in the order they are checked: generate switch, idle, duration and length,
external context, quota. A task that fails one is skipped with the gate's reason code and
tried again later.

`force` skips the idle, duration and length gates, never the switch, external-context or
quota gates. The quota gate reads every user's quota of the batch at once and fails closed:
a quota that cannot be read skips the task (`quota_check_failed`), it never assumes there is
quota left.
"""

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from automemory import conf
from automemory.models import AutoMemorySettings, Reason
from automemory.services.extraction.candidates import Candidate, ExternalEvent
from automemory.services.extraction.log import Verdict, skipped
from automemory.services.redactor import marker_safe_end, redacted_slice
from controlplane.services import quota as quota_service

logger = logging.getLogger(__name__)

# How much of a search query or a server/tool name a log detail quotes.
DETAIL_QUOTE_CHARS = 60


def gates_check(
    candidates: Sequence[Candidate], *, now: datetime, force: bool
) -> tuple[list[Candidate], dict[int, Verdict]]:
    """Every gate, in order, for a batch: the candidates that pass them all, and a verdict
    per task id of those that fail one."""
    verdicts: dict[int, Verdict] = {}
    passed = []
    for candidate in candidates:
        verdict = early_gates(candidate, now=now, force=force)
        if verdict is None:
            passed.append(candidate)
        else:
            verdicts[candidate.task.pk] = verdict
    verdicts.update(quota_gate(passed, now=now))
    extractable = []
    for candidate in passed:
        if candidate.task.pk not in verdicts:
            extractable.append(candidate)
    return extractable, verdicts


def early_gates(candidate: Candidate, *, now: datetime, force: bool) -> Verdict | None:
    """Gates 1 to 4; None when the task may go on to the quota gate."""
    task, prefs, flags = candidate.task, candidate.prefs, candidate.flags
    if not candidate.generate:
        flag = flags.generate_memories if flags is not None else None
        source = "task flag" if flag is not None else "user setting"
        return skipped(Reason.GENERATE_DISABLED, f"generate_memories off ({source})")
    if not force:
        if task.finished_at is None:
            return skipped(Reason.MISSING_TIMESTAMPS, "finished_at is not set")
        idle = (now - task.finished_at).total_seconds()
        if idle < prefs.idle_seconds:
            return skipped(
                Reason.NOT_IDLE,
                f"idle {int(idle)}s of the {prefs.idle_seconds}s needed",
                retry_after=task.finished_at + timedelta(seconds=prefs.idle_seconds),
            )
        if task.started_at is None:
            return skipped(Reason.MISSING_TIMESTAMPS, "started_at is not set")
        duration = (task.finished_at - task.started_at).total_seconds()
        if duration < prefs.min_duration_seconds:
            return skipped(
                Reason.DURATION_TOO_SHORT,
                f"ran {duration:.0f}s, under {prefs.min_duration_seconds}s",
            )
        length = len(task.result_text or "")
        if length < prefs.min_result_chars:
            return skipped(
                Reason.RESULT_TOO_SHORT,
                f"result has {length} characters, under {prefs.min_result_chars}",
            )
    if prefs.disable_on_external_context:
        seen = external_context_seen(candidate)
        if seen is not None:
            return skipped(Reason.EXTERNAL_CONTEXT, seen)
    return None


def external_context_seen(candidate: Candidate) -> str | None:
    """What external context the task saw, as a short redacted phrase; None when none.

    An inter-task message, being a coordinator's subtask, or an MCP call or web search in
    one of its runs (calls to the servers the user lists as internal do not count).
    """
    if candidate.received_message:
        return "received an inter-task message"
    if candidate.task.parent_task_id is not None:
        return "subtask of a coordinator task"
    internal = internal_mcp_servers(candidate.prefs)
    external = [
        event
        for event in candidate.events
        if event.kind != "mcp_tool_call" or event.server not in internal
    ]
    if not external:
        return None
    seen = _described(external[0])
    if len(external) > 1:
        seen += f" (and {len(external) - 1} more external call{'s' if len(external) > 2 else ''})"
    return seen


def internal_mcp_servers(prefs: AutoMemorySettings) -> set[str]:
    """The MCP servers whose calls count as internal (not external context): the memory
    tools' own server, and those the user lists."""
    listed = prefs.internal_mcp_servers if isinstance(prefs.internal_mcp_servers, list) else []
    return {conf.MEMORY_SERVER_NAME, *(name for name in listed if isinstance(name, str))}


def _described(event: ExternalEvent) -> str:
    if event.kind == "mcp_tool_call":
        return f"MCP call {_quoted(event.server)}/{_quoted(event.tool)}"
    return f"web search '{_quoted(event.search_query)}'"


def _quoted(text: str | None) -> str:
    """A redacted, single-line, short excerpt of event text for a log detail: redacted
    first, then cut (never part of a secret, nor of a redaction marker)."""
    if not text:
        return "?"
    text = " ".join(redacted_slice(text, end=DETAIL_QUOTE_CHARS * 20).split())
    if len(text) <= DETAIL_QUOTE_CHARS:
        return text
    return text[: marker_safe_end(text, DETAIL_QUOTE_CHARS - 3)] + "..."


def quota_gate(candidates: Sequence[Candidate], *, now: datetime) -> dict[int, Verdict]:
    """Gate 5 for the candidates that passed the others: a verdict per task id that fails it
    (quota low, or unreadable), none for those that pass. Two queries for the batch."""
    if not candidates:
        return {}
    statuses = _quota_statuses({candidate.task.user_id for candidate in candidates}, now=now)
    verdicts = {}
    for candidate in candidates:
        status = statuses.get(candidate.task.user_id)
        threshold = candidate.prefs.min_rate_limit_remaining_percent
        if status is None:
            verdicts[candidate.task.pk] = skipped(
                Reason.QUOTA_CHECK_FAILED,
                "quota could not be read",
                retry_after=now + timedelta(seconds=conf.get("QUOTA_CHECK_RETRY_SECONDS")),
            )
        elif status.remaining_percent < threshold:
            verdicts[candidate.task.pk] = skipped(
                Reason.QUOTA_LOW,
                f"{status.remaining_percent_display}% of the monthly quota left, "
                f"below {threshold}%",
                retry_after=now + timedelta(seconds=conf.get("QUOTA_LOW_RETRY_SECONDS")),
            )
    return verdicts


def _quota_statuses(user_ids: set[int], *, now: datetime) -> dict:
    """Quota per user; an empty answer when it cannot be read (the gate then fails closed)."""
    try:
        return quota_service.quota_statuses_get(user_ids=sorted(user_ids), now=now)
    except Exception:
        logger.warning(
            "auto memory: quota could not be read for users %s; skipping their tasks",
            sorted(user_ids),
            exc_info=True,
        )
        return {}
