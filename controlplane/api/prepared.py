"""List pages whose statement is built and compiled once per process and shape.

A list page's queryset (its rows' columns, a dozen plugged-in expressions, subqueries and the
list's total) costs Django more to build and compile than the database costs to run it: on
the memory list about 2.3 ms of a request's 6 ms. A `PreparedList` builds the queryset once
per shape (which filters are given, the page's bounds) with stand-in values, keeps the SQL
and where each stand-in landed among its parameters, and each later page binds its own
values to that SQL and reads the rows through the compiled query's own converters, exactly
as `.values()` would.

Values are only ever bound as parameters. A stand-in is a value no caller passes (a negative
id, a string holding NUL characters); a shape where a stand-in is written into the SQL text
or inside another parameter (a LIKE pattern) is not prepared: its pages are read the plain
way, as is a falsy value (a builder may test it) and anything but an int or a str.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet

log = logging.getLogger(__name__)

# Shapes kept per process (pages past the first are shapes too: LIMIT and OFFSET are in the
# SQL text); the least recently used goes first.
MAX_SHAPES = 256
_STAND_IN_INT = -(2**62)


@dataclass(frozen=True)
class _Statement:
    sql: str
    params: tuple
    slots: tuple[tuple[int, str], ...]  # (parameter index, value name)
    names: tuple[str, ...]
    compiler: Any


class PreparedList:
    """A list read built by `build(**values)` (a `.values()` queryset, ordered), prepared
    per shape. `page(values, offset, size, extra)` reads one page; `extra(queryset, bounds)`
    adds what the page reads beside its rows (the pagination's total) and slices it."""

    def __init__(self, build: Callable[..., QuerySet]) -> None:
        self.build = build
        self._statements: OrderedDict[tuple, _Statement | None] = OrderedDict()
        self._lock = threading.Lock()

    def bind(self, **values) -> BoundList:
        """This list with the request's values: what an endpoint returns for a page."""
        return BoundList(self, values)

    def rows(self, values: dict, page: Callable[[QuerySet], QuerySet], shape: tuple) -> list:
        """The rows of `page(build(**values))`: through the shape's prepared statement when
        it has one, else the plain way. `shape` names what `page` adds (its bounds)."""
        given = {name: value for name, value in values.items() if value is not None}
        # A falsy value is a shape of its own: a builder may test it (`if status:`).
        key = (
            *shape,
            *sorted((name, type(value).__name__, bool(value)) for name, value in given.items()),
        )
        statement = self._statement(key, given, values, page)
        if statement is None:
            return list(page(self.build(**values)))
        alias = statement.compiler.using
        params = list(statement.params)
        for index, name in statement.slots:
            params[index] = given[name]
        with connections[alias].cursor() as cursor:
            cursor.execute(statement.sql, params)
            fetched = cursor.fetchall()
        names = statement.names
        rows = statement.compiler.results_iter([fetched])
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _statement(self, key, given, values, page) -> _Statement | None:
        with self._lock:
            if key in self._statements:
                self._statements.move_to_end(key)
                return self._statements[key]
        statement = self._prepare(given, values, page)
        with self._lock:
            self._statements[key] = statement
            while len(self._statements) > MAX_SHAPES:
                self._statements.popitem(last=False)
        return statement

    def _prepare(self, given: dict, values: dict, page) -> _Statement | None:
        stand_ins = {}
        for number, (name, value) in enumerate(sorted(given.items())):
            if not value:
                return None  # a stand-in would be truthy where the value is not
            if type(value) is int:
                stand_ins[name] = _STAND_IN_INT - number
            elif type(value) is str:
                stand_ins[name] = f"\x00prepared {name}\x00"
            else:
                return None
        queryset = page(self.build(**{**values, **stand_ins}))
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        by_value = {stand_in: name for name, stand_in in stand_ins.items()}
        slots = []
        for index, param in enumerate(params):
            if param in by_value and type(param) is type(stand_ins[by_value[param]]):
                slots.append((index, by_value[param]))
            elif isinstance(param, str) and any(
                isinstance(s, str) and s in param for s in by_value
            ):
                return None  # a value inside another parameter (a LIKE pattern)
        if any(str(stand_in) in sql for stand_in in stand_ins.values()):
            return None  # a value written into the SQL text
        if {name for _, name in slots} != set(stand_ins):
            return None  # a value the statement does not bind where it can be found
        query = queryset.query
        names = (
            tuple(query.selected)
            if query.selected
            else (*query.extra_select, *query.values_select, *query.annotation_select)
        )
        return _Statement(sql, tuple(params), tuple(slots), names, compiler)


@dataclass(frozen=True)
class BoundList:
    """A prepared list with one request's values (`PreparedList.bind`)."""

    prepared: PreparedList
    values: dict

    def queryset(self) -> QuerySet:
        """The list as a plain queryset (counting a page past the end, for one)."""
        return self.prepared.build(**self.values)

    def rows(self, page: Callable[[QuerySet], QuerySet], shape: tuple) -> list:
        return self.prepared.rows(self.values, page, shape)
