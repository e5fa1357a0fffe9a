"""Citations and branch scopes in the database: written with their memory, read for many
memories in one statement each, and what a check found saved in one statement."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import fields

from django.db import connection
from django.utils import timezone

from automemory.models.citations import (
    CitationState,
    MemoryBranchScope,
    MemoryCitation,
)
from automemory.services.citations.anchors import Anchor, TaskCitations
from automemory.services.citations.checks import Cited

CITED_FIELDS = tuple(field.name for field in fields(Cited))
ANCHOR_FIELDS = tuple(field.name for field in fields(Anchor))
# What a check finds of a citation, and what of it is saved (with when it was checked).
FOUND_FIELDS = ("state", "start_line", "end_line", "commit", "branch")
CHECK_SAVED_FIELDS = (*FOUND_FIELDS, "checked_commit")


def citations_replace(*, memory_id: int, anchors: list[Anchor]) -> None:
    """The memory cites `anchors` and nothing else (call inside the memory's transaction)."""
    MemoryCitation.objects.filter(memory_id=memory_id).delete()
    MemoryCitation.objects.bulk_create(
        [
            MemoryCitation(
                memory_id=memory_id,
                **_values(anchor, ANCHOR_FIELDS),
                state=CitationState.FRESH,
                checked_commit=anchor.commit,
            )
            for anchor in anchors
        ]
    )


def task_citations_store(memory_id: int, found: TaskCitations) -> None:
    """Store what `task_citations` found for the memory written (inside its transaction):
    the citations, and the branch scope when the task was not on the default branch."""
    if found.anchors:
        citations_replace(memory_id=memory_id, anchors=found.anchors)
    if found.head and found.branch != found.default_branch:
        branch_scope_set(memory_id=memory_id, branch=found.branch, commit=found.head)


def branch_scope_set(*, memory_id: int, branch: str, commit: str) -> None:
    """Scope the memory to `branch` until `commit` is merged into the default branch."""
    MemoryBranchScope.objects.update_or_create(
        memory_id=memory_id, defaults={"branch": branch, "commit": commit, "merged_at": None}
    )


def citations_read(memory_ids: Iterable[int]) -> dict[int, list[Cited]]:
    """Each memory's citations in the order written (one statement)."""
    found: dict[int, list[Cited]] = defaultdict(list)
    ids = list(memory_ids)
    if not ids:
        return found
    rows = MemoryCitation.objects.filter(memory_id__in=ids).order_by("id").values(*CITED_FIELDS)
    for row in rows:
        found[row["memory_id"]].append(Cited(**row))
    return found


def branch_scopes_read(memory_ids: Iterable[int]) -> dict[int, MemoryBranchScope]:
    """The branch scopes of those memories not merged yet (one statement)."""
    ids = list(memory_ids)
    if not ids:
        return {}
    rows = MemoryBranchScope.objects.filter(memory_id__in=ids, merged_at__isnull=True)
    return {row.memory_id: row for row in rows}


def checks_save(before: list[Cited], after: list[Cited]) -> None:
    """Save what a check found where it differs from what was stored: one statement for all
    (an unchecked or unmerged citation keeps what the last check found)."""
    was = {c.id: c for c in before}
    changed = [
        c
        for c in after
        if c.state not in (CitationState.UNCHECKED, CitationState.UNMERGED)
        and _values(c, FOUND_FIELDS) != _values(was[c.id], FOUND_FIELDS)
    ]
    if not changed:
        return
    now = timezone.now()
    rows = [
        MemoryCitation(pk=c.id, **_values(c, CHECK_SAVED_FIELDS), checked_at=now) for c in changed
    ]
    # One UPDATE (bulk_update's one batch, in its own transaction).
    MemoryCitation.objects.bulk_update(rows, [*CHECK_SAVED_FIELDS, "checked_at"])


def _values(citation: Anchor, names: tuple[str, ...]) -> dict:
    """The citation's values of those fields, by name."""
    return {name: getattr(citation, name) for name in names}


def branch_merged_save(memory_ids: list[int]) -> None:
    """Those memories' branches are merged: project-wide from now on (one statement)."""
    if memory_ids:
        MemoryBranchScope.objects.filter(memory_id__in=memory_ids, merged_at__isnull=True).update(
            merged_at=timezone.now()
        )


# What a ranked read folds into each memory's row (`ranking.ranked_read`): its citations and
# its branch scope (when not merged), as JSON arrays, so a read of any number of memories
# stays one statement.
FOLDED_CITATION_COLUMNS = tuple(name for name in CITED_FIELDS if name != "memory_id")


def folded_columns(alias: str = "m") -> str:
    """Two SQL columns for a memory row aliased `alias`: `code_citations_json` and
    `code_branch_json` (NULL when none)."""
    quote = connection.ops.quote_name
    array = "json_build_array" if connection.vendor == "postgresql" else "json_array"
    group = "json_agg" if connection.vendor == "postgresql" else "json_group_array"
    cited = ", ".join(f"c.{quote(name)}" for name in FOLDED_CITATION_COLUMNS)
    citations = MemoryCitation._meta.db_table
    scopes = MemoryBranchScope._meta.db_table
    return (
        f"(SELECT {group}({array}({cited})) FROM {citations} c"
        f" WHERE c.memory_id = {alias}.id) AS code_citations_json,"
        f" (SELECT {array}(s.branch, s.{quote('commit')}) FROM {scopes} s"
        f" WHERE s.memory_id = {alias}.id AND s.merged_at IS NULL) AS code_branch_json"
    )


def json_value(value):
    """A JSON column's value as Python (SQLite returns text, PostgreSQL decoded values)."""
    if value is None:
        return None
    return json.loads(value) if isinstance(value, str | bytes) else value


def folded_read(memory) -> tuple[list[Cited], tuple[str, str] | None]:
    """A memory's citations (in the order written) and unmerged branch scope, from the
    columns `folded_columns` added to its row."""
    rows = json_value(getattr(memory, "code_citations_json", None)) or []
    cited = [
        Cited(memory_id=memory.pk, **dict(zip(FOLDED_CITATION_COLUMNS, row, strict=True)))
        for row in rows
    ]
    scope = json_value(getattr(memory, "code_branch_json", None))
    return sorted(cited, key=lambda c: c.id), (tuple(scope) if scope else None)
