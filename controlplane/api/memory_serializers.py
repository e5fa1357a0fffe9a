"""A memory as the API shows it: each output field declared once, in `MEMORY_OUTPUT`.

An entry says what the field is (its DRF field: the schema, and DRF's generic output of a
memory object), what a list's row reads for it (model columns, or expressions read beside
them in the page's single statement) and how the output comes from that row. A list's page
goes through the rows (`MemoryOutput.rows`), one memory object through DRF's fields; a test
holds the two equal field for field.
"""

from functools import partial

from django.db.models import F
from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from controlplane.api.row_output import ObjectValue, OutputField, RowOutput, column
from controlplane.models import IdentityMemory
from controlplane.selectors import memory_extra, memory_row_extra_expression
from controlplane.services.instructions import INSTRUCTION_FLAG_LABELS
from controlplane.services.memory_citations import citations_column, citations_read


class CitationOutput(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    commit = serializers.CharField(help_text="The commit at which these lines were found.")
    state = serializers.ChoiceField(
        choices=["fresh", "moved", "changed", "deleted", "unchecked"],
        help_text="What the last check against the code found.",
    )


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


class _ExtraBoolean(_Extra, serializers.BooleanField):
    pass


class _ExtraChar(_Extra, serializers.CharField):
    pass


class _ExtraList(_Extra, serializers.ListField):
    def get_attribute(self, instance):
        return super().get_attribute(instance) or []


def _extra_read(name: str) -> dict:
    """The row reads app value `name` with the expression the app plugged in (none: not
    read, the output shows its default)."""
    return {name: partial(memory_row_extra_expression, name)}


def extra(name: str, default, help_text: str | None = None) -> OutputField:
    """An app's value of the same name (a count with `default` 0, else a time or None)."""
    options = {"help_text": help_text} if help_text else {}
    if default is None:
        drf = _ExtraDateTime(extra_default=None, allow_null=True, **options)
        return OutputField(
            name, reads=_extra_read(name), value=lambda row: row.get(name), drf=drf, when=True
        )
    drf = _ExtraInteger(extra_default=default, **options)
    return OutputField(
        name, reads=_extra_read(name), value=lambda row: row.get(name, default), drf=drf
    )


MEMORY_OUTPUT: tuple[OutputField, ...] = (
    column("id"),
    column("scope"),
    column("project_id"),
    column("content"),
    column("source"),
    OutputField(
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
    OutputField(
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
    OutputField(
        "held_for_review",
        reads=_extra_read("held_for_review_since"),
        value=lambda row: row.get("held_for_review_since") is not None,
        drf=ObjectValue(
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
    # The instruction flags and their approval: auto memory's own row of the memory too.
    OutputField(
        "flagged",
        reads=_extra_read("flagged"),
        value=lambda row: bool(row.get("flagged")),
        drf=_ExtraBoolean(extra_default=False),
    ),
    OutputField(
        "instruction_flags",
        reads=_extra_read("instruction_flags"),
        value=lambda row: [str(flag) for flag in row.get("instruction_flags") or []],
        drf=_ExtraList(
            extra_default=[],
            child=serializers.CharField(),
            help_text="Why the content reads like instructions to the agent (flag ids: "
            + ", ".join(
                f"`{flag}` {label.lower()}" for flag, label in INSTRUCTION_FLAG_LABELS.items()
            )
            + "); empty when it does not.",
        ),
    ),
    OutputField(
        "awaiting_approval",
        # `flagged` and `approved_at` are read for their own fields.
        value=lambda row: bool(row.get("flagged")) and row.get("approved_at") is None,
        drf=ObjectValue(
            lambda memory: (
                bool(memory_extra(memory, "flagged", False))
                and memory_extra(memory, "approved_at", None) is None
            ),
            OpenApiTypes.BOOL,
            help_text="A flagged memory no project owner approved yet: it is not injected, "
            "found or previewed (an owner's own flagged text is approved by its author).",
        ),
    ),
    extra("approved_at", None),
    OutputField(
        "approved_by",
        reads=_extra_read("approved_by"),
        value=lambda row: row.get("approved_by"),
        drf=_ExtraChar(extra_default=None, allow_null=True),
    ),
    column("archived_at", when=True),
    OutputField(
        "source_task_ids",
        # Auto memory's provenance links (an app's value, read in the page's statement).
        reads=_extra_read("source_task_ids"),
        value=lambda row: row.get("source_task_ids") or [],
        drf=ObjectValue(
            lambda memory: memory_extra(memory, "source_task_ids", []),
            serializers.ListField(child=serializers.IntegerField()),
            help_text="For an auto memory: every task whose knowledge is in it, in the order "
            "they went in (the task that wrote it first, then those consolidation merged "
            "into it).",
        ),
    ),
    OutputField(
        "citations",
        # Read beside the row in the page's statement when an app keeps citations
        # (controlplane.services.memory_citations, registered once the apps are ready).
        reads={"citations": citations_column},
        value=lambda row: row.get("citations") or [],
        drf=ObjectValue(
            citations_read,
            CitationOutput(many=True),
            help_text="The lines of the project's code the memory cites, as the last check "
            "found them (`state`).",
        ),
    ),
)


# A memory: its fields are `MEMORY_OUTPUT`'s, in that order; a list's page goes through
# `MemoryOutput.rows`. (A comment: the schema would show a docstring as the output's
# description.)
class MemoryOutput(RowOutput):
    class Meta:
        model = IdentityMemory
        output = MEMORY_OUTPUT
        read_only_fields = [entry.name for entry in MEMORY_OUTPUT]
