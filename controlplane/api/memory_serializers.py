"""A memory as the API shows it: each output field declared once, in `MEMORY_OUTPUT`.

An entry says what the field is (its DRF field: the schema, and DRF's generic output of a
memory object), what a list's row reads for it (model columns, or expressions read beside
them in the page's single statement) and how the output comes from that row. A list's page
goes through the rows (`MemoryOutput.rows`), one memory object through DRF's fields; a test
holds the two equal field for field.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from django.db.models import Expression, F, QuerySet
from django.utils import timezone
from drf_spectacular.drainage import set_override
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from controlplane.models import IdentityMemory, memory_awaiting_approval
from controlplane.selectors import memory_extra, memory_row_extras
from controlplane.services.instructions import INSTRUCTION_FLAG_LABELS
from controlplane.services.memory_citations import citations_column, citations_read


class MemoryValue(serializers.Field):
    """A read-only output computed from the whole memory object by `of_memory`; `schema` is its
    OpenAPI type (a basic type or a serializer field)."""

    def __init__(self, of_memory: Callable[[IdentityMemory], Any], schema, **kwargs):
        super().__init__(source="*", read_only=True, **kwargs)
        self.of_memory = of_memory
        set_override(self, "field", schema)

    def to_representation(self, memory: IdentityMemory):
        return self.of_memory(memory)


class CitationOutput(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    commit = serializers.CharField(help_text="The commit at which these lines were found.")
    state = serializers.ChoiceField(
        choices=["fresh", "moved", "changed", "deleted", "unchecked"],
        help_text="What the last check against the code found.",
    )


def _iso(value, zone) -> str | None:
    """DRF's DateTimeField output (ISO 8601 in `zone`, `Z` for UTC), None for None; DRF's
    field costs about 10 us a value, this 1."""
    if value is None:
        return None
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


@dataclass(frozen=True)
class MemoryField:
    """One output field of a memory.

    `reads`: the row's keys, each a model column or an expression (a bare name: the model
    column of that name). `value`: the output from the row (default: the row's first key).
    `drf`: the DRF field (default: built by ModelSerializer from the model field `name`).
    `when`: the value is a datetime, written as DRF writes one.
    """

    name: str
    reads: dict[str, str | Expression] = field(default_factory=dict)
    value: Callable[[dict], Any] | None = None
    drf: serializers.Field | None = None
    when: bool = False

    def row_value(self) -> Callable[[dict], Any]:
        return self.value or itemgetter(next(iter(self.reads), self.name))


def column(name: str, **options) -> MemoryField:
    """A field that is the model's column of the same name."""
    return MemoryField(name, reads={name: name}, **options)


class _Extra:
    """A DRF field whose value an app keeps about the memory in its own table
    (`selectors.memory_extra`); `extra_default` when no app registered it."""

    def __init__(self, *, extra_default, **kwargs) -> None:
        self.extra_default = extra_default
        super().__init__(read_only=True, **kwargs)

    def get_attribute(self, instance):
        return memory_extra(instance, self.field_name, self.extra_default)


class _ExtraInteger(_Extra, serializers.IntegerField):
    pass


class _ExtraDateTime(_Extra, serializers.DateTimeField):
    pass


def extra(name: str, default, help_text: str | None = None) -> MemoryField:
    """An app's value of the same name (a count with `default` 0, else a time or None): the
    row's key when the page read it, else `default`."""
    options = {"help_text": help_text} if help_text else {}
    if default is None:
        drf = _ExtraDateTime(extra_default=None, **options)
        return MemoryField(name, value=lambda row: row.get(name), drf=drf, when=True)
    drf = _ExtraInteger(extra_default=default, **options)
    return MemoryField(name, value=lambda row: row.get(name, default), drf=drf)


MEMORY_OUTPUT: tuple[MemoryField, ...] = (
    column("id"),
    column("scope"),
    column("project_id"),
    column("content"),
    column("source"),
    MemoryField(
        "source_thread_id",
        reads={"source_task_id": "source_task_id"},
        drf=serializers.IntegerField(
            source="source_task_id",
            read_only=True,
            allow_null=True,
            help_text="For an auto memory: the id of the task it was extracted from.",
        ),
    ),
    column("status"),
    column("superseded_by_id"),
    MemoryField(
        "created_by",
        reads={"created_by_name": F("created_by__username")},
        drf=serializers.CharField(source="created_by.username", read_only=True, default=None),
    ),
    column("created_at", when=True),
    column("updated_at", when=True),
    # Usage and the report hold: auto memory's own row of the memory, an app's values
    # (`selectors.memory_row_extra_register`), read in the page's statement.
    extra("injection_count", 0, "How many tasks the memory was injected into."),
    extra("last_injected_at", None),
    extra(
        "cite_count",
        0,
        "How many tasks cited the memory as used (a `Memories used:` line, or the memory "
        "tool's cite).",
    ),
    extra("last_cited_at", None),
    extra("report_count", 0, "How many reports said the memory misled (wrong, outdated, unsafe)."),
    extra("last_reported_at", None),
    MemoryField(
        "held_for_review",
        value=lambda row: row.get("held_for_review_since") is not None,
        drf=MemoryValue(
            lambda memory: memory_extra(memory, "held_for_review_since", None) is not None,
            OpenApiTypes.BOOL,
            help_text="A report holds it out of injection and search until a project owner "
            "reviews it (approves, edits or forgets it).",
        ),
    ),
    column(
        "visibility",
        drf=serializers.CharField(
            read_only=True,
            help_text="`project`: every member sees it; `author`: held for its author (drawn "
            "from a task that received their own memories) until they share it.",
        ),
    ),
    column("flagged"),
    column(
        "instruction_flags",
        value=lambda row: [str(flag) for flag in row["instruction_flags"]],
        drf=serializers.ListField(
            child=serializers.CharField(),
            read_only=True,
            help_text="Why the content reads like instructions to the agent (flag ids: "
            + ", ".join(
                f"`{flag}` {label.lower()}" for flag, label in INSTRUCTION_FLAG_LABELS.items()
            )
            + "); empty when it does not.",
        ),
    ),
    MemoryField(
        "awaiting_approval",
        # `flagged` and `approved_at` are read for their own fields.
        value=lambda row: memory_awaiting_approval(
            flagged=row["flagged"], approved_at=row["approved_at"]
        ),
        drf=serializers.BooleanField(
            read_only=True,
            help_text="A flagged memory no project owner approved yet: it is not injected, "
            "found or previewed (an owner's own flagged text is approved by its author).",
        ),
    ),
    column("approved_at", when=True),
    MemoryField(
        "approved_by",
        reads={"approved_by_name": F("approved_by__username")},
        drf=serializers.CharField(
            source="approved_by.username", read_only=True, default=None, allow_null=True
        ),
    ),
    column("archived_at", when=True),
    MemoryField(
        "source_task_ids",
        # Auto memory's provenance links (an app's value, read in the page's statement).
        value=lambda row: row.get("source_task_ids") or [],
        drf=MemoryValue(
            lambda memory: memory_extra(memory, "source_task_ids", []),
            serializers.ListField(child=serializers.IntegerField()),
            help_text="For an auto memory: every task whose knowledge is in it, in the order "
            "they went in (the task that wrote it first, then those consolidation merged "
            "into it).",
        ),
    ),
    MemoryField(
        "citations",
        # Read beside the row in the page's statement when an app keeps citations
        # (controlplane.services.memory_citations); `MemoryOutput.rows` adds the expression.
        value=lambda row: row.get("citations") or [],
        drf=MemoryValue(
            citations_read,
            CitationOutput(many=True),
            help_text="The lines of the project's code the memory cites, as the last check "
            "found them (`state`).",
        ),
    ),
)

_COLUMNS = [
    name for entry in MEMORY_OUTPUT for name, read in entry.reads.items() if isinstance(read, str)
]
_EXPRESSIONS = {
    name: read
    for entry in MEMORY_OUTPUT
    for name, read in entry.reads.items()
    if not isinstance(read, str)
}
_ROW_VALUES = [(entry.name, entry.row_value(), entry.when) for entry in MEMORY_OUTPUT]


# A memory: its fields are `MEMORY_OUTPUT`'s, in that order. (A comment: the schema would show
# a docstring as the output's description.)
class MemoryOutput(serializers.ModelSerializer):
    class Meta:
        model = IdentityMemory
        fields = [entry.name for entry in MEMORY_OUTPUT]
        read_only_fields = fields

    @staticmethod
    def rows(memories: QuerySet[IdentityMemory]) -> QuerySet:
        """The memories as rows of what the output reads: a page of any size is one statement
        (no model, user or link objects built)."""
        extras = memory_row_extras()
        citations = citations_column()
        if citations is None:
            return memories.values(*_COLUMNS, **_EXPRESSIONS, **extras)
        return memories.values(*_COLUMNS, **_EXPRESSIONS, **extras, citations=citations)

    def to_representation(self, memory: IdentityMemory | dict) -> dict:
        """A list's row (`rows`) read directly, one dictionary read a field rather than DRF's
        per-field machinery (about 20 lookups and checks a field); a memory object through
        DRF's fields. The two are equal field for field (a test compares)."""
        if type(memory) is dict:
            zone = timezone.get_current_timezone()
            return {
                name: _iso(value(memory), zone) if when else value(memory)
                for name, value, when in _ROW_VALUES
            }
        return super().to_representation(memory)


# The entries' own DRF fields, as if declared in the class body (ModelSerializer builds the
# others from the model).
for _entry in MEMORY_OUTPUT:
    if _entry.drf is not None:
        MemoryOutput._declared_fields[_entry.name] = _entry.drf
