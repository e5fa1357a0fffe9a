"""Small helpers for the few statements the ORM cannot write, such as `UPDATE ... RETURNING`,
and for the lookups every request makes, written once per process.

Django 5.2 has no RETURNING for updates, and no way to read another table's values in the
same statement as a write. The worker's claim and finish need both to stay one round trip.
The token, project and task lookups of every API request are cheap to run and several times
dearer to compile through the ORM. These helpers keep that raw SQL honest: table and column
names come from the models, and the values read back go through the same database converters
the ORM applies, so a row read here is the row the ORM would have read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.db.models.expressions import Col


@dataclass(frozen=True)
class Scalar:
    """A scalar expression read beside a row: `(sql) AS alias`, its parameters, and the model
    field whose database converters turn its value into a Python value."""

    alias: str
    sql: str
    params: tuple = ()
    field: Field | None = None


def qn(name: str) -> str:
    """A quoted identifier."""
    return connection.ops.quote_name(name)


def table(model: type[Model]) -> str:
    return qn(model._meta.db_table)


def column(model: type[Model], name: str) -> str:
    return qn(model._meta.get_field(name).column)


def concrete_fields(model: type[Model]) -> list[Field]:
    return list(model._meta.concrete_fields)


def select_list(
    model: type[Model], alias: str, *, scalars: Sequence[Scalar] = ()
) -> tuple[str, list]:
    """`alias.col, ..., (scalar) AS name, ...` for every concrete field of `model`."""
    parts = [f"{alias}.{qn(field.column)}" for field in concrete_fields(model)]
    params: list = []
    for scalar in scalars:
        parts.append(f"({scalar.sql}) AS {qn(scalar.alias)}")
        params.extend(scalar.params)
    return ", ".join(parts), params


def db_value(field: Field, value: Any) -> Any:
    """`value` as read from the database, converted as the ORM converts `field`'s column."""
    expression = Col(field.model._meta.db_table if field.model else "", field)
    converters = connection.ops.get_db_converters(expression) + field.get_db_converters(connection)
    for converter in converters:
        value = converter(value, expression, connection)
    return value


def instance_from_row(
    model: type[Model], row: Sequence[Any], *, scalars: Iterable[Scalar] = ()
) -> tuple[Model, dict[str, Any]]:
    """The model instance and the scalar values of a row laid out as `select_list` wrote it."""
    fields = concrete_fields(model)
    values = [db_value(field, value) for field, value in zip(fields, row, strict=False)]
    instance = model.from_db(connection.alias, [f.attname for f in fields], values)
    extras = {}
    for scalar, value in zip(scalars, row[len(fields) :], strict=True):
        extras[scalar.alias] = db_value(scalar.field, value) if scalar.field else value
    return instance, extras


def instances_from_row(models: Sequence[type[Model]], row: Sequence[Any]) -> tuple[list, Sequence]:
    """One instance of each of `models` from a row laid out as their `select_list`s, in that
    order (a join), and the values after them."""
    instances, start = [], 0
    for model in models:
        end = start + len(concrete_fields(model))
        instances.append(instance_from_row(model, row[start:end])[0])
        start = end
    return instances, row[start:]


def sqlite_tables_and_triggers(cursor) -> set[str]:
    """The names of a SQLite database's tables and triggers: what a post-migrate check reads
    to re-create the triggers a table rebuild dropped."""
    rows = cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
    return {row[0] for row in rows.fetchall()}
