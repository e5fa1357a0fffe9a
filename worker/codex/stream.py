"""The JSONL event stream of `codex exec --json`, read one line at a time (`CodexStream`).

Also the JSON reading the CLI's session files share with it (`json_object`, a repeated key
keeps its first value) and its usage objects (`token_usage_parse`), and what of the CLI's
stderr is worth a failure reason (`stderr_reason`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from automemory.conf import MEMORY_SERVER_NAME
from automemory.services.redactor import redact
from worker.executors.base import TOKEN_USAGE_FIELDS, TaskEventData, TokenUsage, stderr_tail

logger = logging.getLogger(__name__)

# Items kept as task events: the external-context gate of auto memory reads them.
EVENT_ITEM_TYPES = frozenset({"mcp_tool_call", "web_search"})
# The most characters of a memory tool call's arguments kept in its event.
MEMORY_CALL_ARGUMENT_CHARS = 2000
# An event item larger than this (as JSON) keeps its fields but loses its tool result body.
EVENT_MAX_JSON_CHARS = 16_000

# stderr lines the CLI writes on healthy runs too; never a failure reason.
STDERR_NOISE = (
    re.compile(r"^WARNING: proceeding, even though we could not create PATH aliases"),
    re.compile(r"^Reading prompt from stdin"),
    # tracing lines of codex's own crates: "2026-11-30T16:03:30.719Z ERROR codex_core::...: ..."
    re.compile(r"^\S+\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+codex_\w+(::\w+)*:"),
)
# A Rust error report ends with a backtrace of unnamed frames: not worth a failure reason.
STDERR_BACKTRACE = "Stack backtrace:"


def json_object(line: str) -> dict[str, Any]:
    """The JSON object on `line` (a repeated key keeps its first value); {} for anything else."""
    try:
        value = json.loads(line, object_pairs_hook=_first_key_wins)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _first_key_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose key repeats keeps the first value (codex's `web_search` items have
    two `id` keys: the thread item's, then the model's); later ones go to `duplicate_keys`."""
    result: dict[str, Any] = {}
    duplicates: dict[str, list[Any]] = {}
    for key, value in pairs:
        if key in result:
            duplicates.setdefault(key, []).append(value)
        else:
            result[key] = value
    if duplicates:
        result["duplicate_keys"] = duplicates
    return result


def token_usage_parse(raw: Any) -> TokenUsage:
    """A `TokenUsage` from codex's usage object; missing or bad counts are 0."""
    if not isinstance(raw, dict):
        return TokenUsage()

    def count(key: str) -> int:
        try:
            return max(0, int(raw.get(key) or 0))
        except (TypeError, ValueError):
            return 0

    return TokenUsage(*(count(name) for name in TOKEN_USAGE_FIELDS))


@dataclass
class CodexStream:
    """What a `codex exec --json` event stream said, fed one line at a time."""

    thread_id: str = ""
    last_message: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    turn_completed: bool = False
    turn_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events: list[TaskEventData] = field(default_factory=list)
    malformed_lines: int = 0

    def feed(self, line: str) -> dict[str, Any] | None:
        """Take one stdout line; return the parsed event (None for blank or malformed lines)."""
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line, object_pairs_hook=_first_key_wins)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.malformed_lines += 1
            logger.warning("codex: skipped a malformed event line: %.200s", line)
            return None
        kind = event["type"]
        if kind == "thread.started":
            self.thread_id = str(event.get("thread_id") or self.thread_id)
        elif kind == "item.completed":
            self._item_completed(event.get("item"))
        elif kind == "turn.completed":
            self.turn_completed = True
            self.usage = self.usage + token_usage_parse(event.get("usage"))
        elif kind == "turn.failed":
            self.turn_failures.append(_message(event.get("error")) or "turn failed")
        elif kind == "error":
            self.errors.append(_message(event) or "error")
        return event

    def failure_detail(self) -> str:
        """Why the turn failed, from the events: the `turn.failed` message, else the last error."""
        if self.turn_failures:
            return "; ".join(self.turn_failures)
        return self.errors[-1] if self.errors else ""

    def _item_completed(self, item: Any) -> None:
        if not isinstance(item, dict):
            self.malformed_lines += 1
            return
        item_type = item.get("type")
        if item_type == "agent_message" and isinstance(item.get("text"), str):
            self.last_message = item["text"]
        elif item_type == "error":
            # a non-fatal warning (e.g. "Model metadata for `x` not found"): the turn goes on
            self.warnings.append(_message(item))
            logger.info("codex warning: %.500s", _message(item))
        elif item_type in EVENT_ITEM_TYPES:
            if item.get("server") == MEMORY_SERVER_NAME:
                item = _memory_call(item)
            self.events.append(TaskEventData(kind=item_type, data=_compact(item)))


def stderr_reason(text: str) -> str:
    """The stderr tail worth showing: without the CLI's routine noise and backtrace frames."""
    kept = []
    for line in (text or "").splitlines():
        if line.strip() == STDERR_BACKTRACE:
            break
        if any(pattern.match(line) for pattern in STDERR_NOISE):
            continue
        kept.append(line)
    return stderr_tail("\n".join(kept))


def _message(raw: Any) -> str:
    if isinstance(raw, dict):
        return str(raw.get("message") or "")
    return str(raw or "")


def _memory_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call of the memory tools, as kept: which tool, and its arguments redacted; never
    its answer (memory text the database holds already) nor a note's secrets (the feedback
    row keeps the note redacted)."""
    kept = {key: item[key] for key in ("id", "type", "server", "tool", "status") if key in item}
    arguments = item.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    kept["arguments"] = redact(text)[:MEMORY_CALL_ARGUMENT_CHARS]
    kept["result_dropped"] = True
    return kept


def _compact(item: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(item, default=str)) <= EVENT_MAX_JSON_CHARS:
        return item
    compact = {key: value for key, value in item.items() if key != "result"}
    compact["result_truncated"] = True
    if len(json.dumps(compact, default=str)) > EVENT_MAX_JSON_CHARS:
        compact = {
            key: item.get(key)
            for key in ("id", "type", "server", "tool", "query", "status")
            if key in item
        }
        compact["truncated"] = True
    return compact
