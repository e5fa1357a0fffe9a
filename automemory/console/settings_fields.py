"""HTML form data <-> the API's input shapes, so the console validates with the API's serializers.

A browser sends every value as text and leaves unchecked boxes out. These helpers turn a form
post into the JSON-like values the API's serializers expect (so their messages are the ones a
user sees) and describe each field for the template.
"""

import re
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.http import QueryDict

from automemory.api.serializers import AutoMemorySettingsSerializer, RunInputSerializer
from automemory.models.settings import (
    MAX_DURATION_SECONDS,
    MAX_IDLE_SECONDS,
    MAX_INTERNAL_MCP_SERVERS,
    MAX_RESULT_CHARS,
    InjectionRanking,
)

BOOLEAN, INTEGER, DECIMAL, TEXT, LINES, CHOICE = (
    "boolean",
    "integer",
    "decimal",
    "text",
    "lines",
    "choice",
)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,20}")


@dataclass(frozen=True)
class SettingField:
    """One setting as the form shows it."""

    name: str
    label: str
    kind: str
    help: str
    group: str
    minimum: int | Decimal | None = None  # the serializer's bounds (settings_fields)
    maximum: int | Decimal | None = None


# Labels, kinds, groups, and help texts the serializer does not carry (its own help_text
# wins when it has one; the bounds are always its own).
_FIELDS = (
    SettingField(
        "generate_memories",
        "Generate memories from my completed tasks",
        BOOLEAN,
        "Completed tasks may be turned into memories for their project.",
        "Switches",
    ),
    SettingField(
        "use_memories",
        "Use memories in my new tasks",
        BOOLEAN,
        "A new task's first turn gets the project's and your memories.",
        "Switches",
    ),
    SettingField(
        "disable_on_external_context",
        "Skip tasks that saw external context",
        BOOLEAN,
        "Tasks that received an inter-task message, are a coordinator's subtask, or called an "
        "MCP server not listed below or searched the web are not remembered.",
        "Gates",
    ),
    SettingField(
        "min_rate_limit_remaining_percent",
        "Minimum quota left (percent)",
        INTEGER,
        "Skip extraction when less of this month's quota than this is left (0-100).",
        "Gates",
    ),
    SettingField(
        "idle_seconds",
        "Idle time before extraction (seconds)",
        INTEGER,
        f"A completed task must have been idle this long (0-{MAX_IDLE_SECONDS:,}).",
        "Gates",
    ),
    SettingField(
        "min_duration_seconds",
        "Minimum run time (seconds)",
        INTEGER,
        f"Runs shorter than this are skipped (0-{MAX_DURATION_SECONDS:,}).",
        "Gates",
    ),
    SettingField(
        "min_result_chars",
        "Minimum result length (characters)",
        INTEGER,
        f"Results shorter than this are skipped (0-{MAX_RESULT_CHARS:,}).",
        "Gates",
    ),
    SettingField(
        "internal_mcp_servers",
        "Internal MCP servers (one per line)",
        LINES,
        f"MCP servers whose tool calls count as internal, not external context (at most "
        f"{MAX_INTERNAL_MCP_SERVERS}).",
        "Gates",
    ),
    SettingField(
        "extract_model",
        "Extraction model",
        TEXT,
        "The model that writes each memory (an OpenAI-compatible server). Empty: the "
        "deterministic strategy.",
        "Models",
    ),
    SettingField(
        "consolidation_model",
        "Consolidation model",
        TEXT,
        "The model that merges a new memory with the project's similar ones. Empty: the "
        "same-goal rule.",
        "Models",
    ),
    SettingField(
        "fallback_to_deterministic",
        "Fall back to the deterministic memory",
        BOOLEAN,
        "When the extraction model is unavailable, write the deterministic memory instead of "
        "waiting for the model.",
        "Models",
    ),
    SettingField(
        "share_private_derived",
        "Share memories drawn from my private notes at once",
        BOOLEAN,
        "Off, a memory from a task that received your own notes waits for you to share it; "
        "on, members see at once what the agent made of them.",
        "Privacy",
    ),
    SettingField(
        "personal_memories_in_shared_projects",
        "Give my own memories to tasks in shared projects",
        BOOLEAN,
        "Members read your tasks' results, and an agent can reword what it was given; off, "
        "your own memories go only into projects where you are the only member.",
        "Privacy",
    ),
    SettingField(
        "monthly_memory_budget_usd",
        "Monthly memory budget (USD)",
        DECIMAL,
        "The most auto memory's model calls may cost you in a calendar month (UTC).",
        "Models",
    ),
    SettingField(
        "injection_ranking",
        "Which memories a new task gets",
        CHOICE,
        "Newest first, or the best full-text match with the task's goal and prompt.",
        "Injection and retention",
    ),
    SettingField(
        "injection_max_chars",
        "Most characters injected",
        INTEGER,
        "The most characters the whole injected block may take.",
        "Injection and retention",
    ),
    SettingField(
        "max_unused_days",
        "Archive unused memories after (days)",
        INTEGER,
        "Archive auto memories not cited, edited or restored in this many days (0: never).",
        "Injection and retention",
    ),
)


def settings_fields() -> tuple[SettingField, ...]:
    """Every auto memory setting, in the form's order, with the bounds the API's serializer
    holds it to and that serializer's help where it has one."""
    serializer_fields = AutoMemorySettingsSerializer().fields
    fields = []
    for spec in _FIELDS:
        api = serializer_fields[spec.name]
        spec = replace(
            spec,
            minimum=getattr(api, "min_value", None),
            maximum=getattr(api, "max_value", None),
        )
        if api.help_text:
            # Plain text on the page: the schema's `code` marks are dropped.
            spec = replace(spec, help=str(api.help_text).replace("`", ""))
        fields.append(spec)
    return tuple(fields)


INJECTION_RANKING_CHOICES = InjectionRanking.choices


def settings_data_from_post(post: QueryDict) -> dict[str, Any]:
    """The form post as the API's JSON body: checkboxes to booleans, integer text to integers.

    Fields not in the post are left out (unchanged), as in a PATCH. Text that is not a whole
    number is passed on as text, so the serializer reports it with the API's own message.
    """
    data: dict[str, Any] = {}
    for spec in _FIELDS:
        if spec.name not in post:
            continue  # not sent: left as it is (a checkbox always sends its hidden "0")
        raw = post.get(spec.name)
        if spec.kind == BOOLEAN:
            # The hidden "0" comes first; a ticked box adds "1" after it.
            data[spec.name] = post.getlist(spec.name)[-1] in ("1", "true", "on")
        elif spec.kind == INTEGER:
            text = (raw or "").strip()
            data[spec.name] = int(text) if _INTEGER_TEXT.fullmatch(text) else text
        elif spec.kind in (DECIMAL, TEXT):
            data[spec.name] = (raw or "").strip()
        elif spec.kind == LINES:
            data[spec.name] = [line.strip() for line in (raw or "").splitlines() if line.strip()]
        else:
            data[spec.name] = raw or ""
    return data


def settings_form_value(spec: SettingField, value: Any) -> Any:
    """A setting's value as its input shows it."""
    if spec.kind == LINES:
        return "\n".join(value) if isinstance(value, list | tuple) else value or ""
    if value is None:
        return ""
    return value


def error_messages(errors: Any) -> list[str]:
    """A serializer's errors for one field as flat messages (list items keep their index)."""
    if isinstance(errors, dict):
        return [
            f"Line {int(key) + 1}: {message}" if str(key).isdigit() else f"{key}: {message}"
            for key, value in errors.items()
            for message in error_messages(value)
        ]
    if isinstance(errors, list | tuple):
        return [message for item in errors for message in error_messages(item)]
    return [str(errors)]


def run_force_from_post(post: QueryDict) -> tuple[bool | None, list[str]]:
    """The Run now form's `force` as the API reads it; (None, messages) when it is not 0 or 1."""
    raw = post.get("force", "0")
    data = {"force": int(raw)} if raw in ("0", "1") else {"force": raw}
    serializer = RunInputSerializer(data=data)
    if not serializer.is_valid():
        return None, error_messages(serializer.errors.get("force", serializer.errors))
    return serializer.validated_data["force"], []
