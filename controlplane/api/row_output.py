"""Output serializers whose list pages go through rows: each output field declared once.

An `OutputField` says what the field is (its DRF field: the schema, and DRF's generic output of
an object), what a list's row reads for it (model columns, or expressions read beside them in
the page's single statement) and how the output comes from that row. A serializer built on
`RowOutput` with `Meta.output` (a tuple of fields) lists its page through `rows` (`.values()`,
no model objects) and writes a row directly; one object goes through DRF's fields. Tests hold
the two equal field for field.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from django.db.models import Expression, QuerySet
from django.utils import timezone
from drf_spectacular.drainage import set_override
from rest_framework import serializers


class ObjectValue(serializers.Field):
    """A read-only output computed from the whole object by `of_object`; `schema` is its
    OpenAPI type (a basic type or a serializer field)."""

    def __init__(self, of_object: Callable[[Any], Any], schema, **kwargs):
        super().__init__(source="*", read_only=True, **kwargs)
        self.of_object = of_object
        set_override(self, "field", schema)

    def to_representation(self, instance):
        return self.of_object(instance)


def iso_datetime(value, zone) -> str | None:
    """DRF's DateTimeField output (ISO 8601 in `zone`, `Z` for UTC), None for None; DRF's
    field costs about 10 us a value, this 1."""
    if value is None:
        return None
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


@dataclass(frozen=True)
class OutputField:
    """One output field.

    `reads`: the row's keys, each a model column (a bare name: the model column of that name),
    an expression, or a function giving one (or None: not read) when a page is read, for an
    expression an app plugs in after this module is imported. `value`: the output from the
    row (default: the row's first key).
    `drf`: the DRF field (default: built by ModelSerializer from the model field `name`).
    `when`: the value is a datetime, written as DRF writes one.
    """

    name: str
    reads: dict[str, str | Expression | Callable[[], Expression | None]] = field(
        default_factory=dict
    )
    value: Callable[[dict], Any] | None = None
    drf: serializers.Field | None = None
    when: bool = False

    def row_value(self) -> Callable[[dict], Any]:
        return self.value or itemgetter(next(iter(self.reads), self.name))


def column(name: str, **options) -> OutputField:
    """A field that is the model's column of the same name."""
    return OutputField(name, reads={name: name}, **options)


# A ModelSerializer whose fields are `Meta.output`'s, in that order (a subclass declares
# `Meta.model` and `Meta.output`; `Meta.fields` and the entries' DRF fields follow). A comment:
# the schema would show a docstring as the description of every output built on it.
class RowOutput(serializers.ModelSerializer):
    _row_columns: list[str] = []
    _row_expressions: dict[str, Expression] = {}
    _row_later: dict[str, Callable[[], Expression | None]] = {}
    _row_values: list[tuple[str, Callable[[dict], Any], bool]] = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "output" not in vars(cls.Meta):
            return  # a subclass with its own fields (its objects go through DRF's)
        output: tuple[OutputField, ...] = cls.Meta.output
        cls.Meta.fields = [entry.name for entry in output]
        cls.Meta.list_serializer_class = RowListOutput
        reads = [(name, read) for entry in output for name, read in entry.reads.items()]
        cls._row_columns = [name for name, read in reads if isinstance(read, str)]
        cls._row_later = {name: read for name, read in reads if callable(read)}
        cls._row_expressions = {
            name: read for name, read in reads if not isinstance(read, str) and not callable(read)
        }
        cls._row_values = [(entry.name, entry.row_value(), entry.when) for entry in output]
        # The entries' own DRF fields, as if declared in the class body (ModelSerializer
        # builds the others from the model).
        for entry in output:
            if entry.drf is not None:
                cls._declared_fields[entry.name] = entry.drf

    @classmethod
    def rows(cls, objects: QuerySet) -> QuerySet:
        """The objects as rows of what the output reads: a page of any size is one statement
        (no model objects built)."""
        later = {name: make() for name, make in cls._row_later.items()}
        later = {name: expression for name, expression in later.items() if expression is not None}
        return objects.values(*cls._row_columns, **cls._row_expressions, **later)

    def to_representation(self, instance) -> dict:
        """A list's row (`rows`) read directly, one dictionary read a field rather than DRF's
        per-field machinery (about 20 lookups and checks a field); an object through DRF's
        fields. The two are equal field for field (tests compare)."""
        if type(instance) is dict:
            return self.rows_represented([instance])[0]
        return super().to_representation(instance)

    def rows_represented(self, rows: list[dict]) -> list[dict]:
        """The output of each row, the time zone read once for them all."""
        zone = timezone.get_current_timezone()
        values = self._row_values
        return [
            {
                name: iso_datetime(value(row), zone) if when else value(row)
                for name, value, when in values
            }
            for row in rows
        ]


class RowListOutput(serializers.ListSerializer):
    """A page of a `RowOutput`: its rows written in one pass (objects through DRF's fields)."""

    def to_representation(self, data) -> list[dict]:
        if type(data) is list and all(type(item) is dict for item in data):
            return self.child.rows_represented(data)
        return super().to_representation(data)
