"""Which memories a task may receive, best first: the one read behind injection, the memory
tool's search, consolidation's candidates and the preview.

A task may receive its user's own user-level memories and its project's memories that the
project sees (or that are held for that user: privacy by consent), that are active and not
held for review: not flagged as instruction-like without an approval, and not reported
without a review (`RECEIVABLE`). They are ranked per scope:

- `recent`: newest first (the default);
- `relevant`: the best full-text matches for the task's goal and prompt first, the newest
  filling the free slots. With `AUTOMEMORY_RANKING_FEEDBACK` on, a match's score counts what
  tasks said of the memory: cited ones rank up to 1.5x better, and one injected into
  `AUTOMEMORY_NEVER_CITED_AFTER` tasks or more that none cited ranks 0.8x as well.

Each read is one query, indexed, whatever the number of memories stored.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection

from automemory import conf
from automemory.models import InjectionRanking
from automemory.services import search
from controlplane.models import IdentityMemory, MemoryScope

# What a task may receive (the SQL alias of the memory table is `m`).
NOT_HELD = "(NOT m.flagged OR m.approved_at IS NOT NULL) AND m.report_hold_at IS NULL"
RECEIVABLE = f"m.status = 'active' AND {NOT_HELD}"
# What the preview explains as left out: memories a task would receive were they not held
# or archived.
WITHHELD = f"m.status IN ('active', 'archived') AND NOT ({RECEIVABLE})"
# A scope's memories a task of user U in project P may see: U's own; P's that the project
# sees, or that are held for U (params: U; P, U).
OWNER = {
    MemoryScope.USER: "m.scope = 'user' AND m.user_id = %s",
    MemoryScope.PROJECT: (
        "m.scope = 'project' AND m.project_id = %s"
        " AND (m.visibility = 'project' OR m.created_by_id = %s)"
    ),
}


def _owner_params(scope: str, *, user_id: int, project_id: int) -> list[int]:
    return [user_id] if scope == MemoryScope.USER else [project_id, user_id]


SCOPES = (MemoryScope.USER, MemoryScope.PROJECT)
NEWEST = "m.created_at DESC, m.id DESC"


def injection_limits() -> dict[str, int]:
    """How many memories of each scope a task's first turn receives at most."""
    return {
        MemoryScope.USER: conf.get("INJECT_USER_LIMIT"),
        MemoryScope.PROJECT: conf.get("INJECT_PROJECT_LIMIT"),
    }


def _feedback_factor() -> str:
    """SQL multiplying a match score (lower is better) by how much tasks used the memory."""
    if not conf.get("RANKING_FEEDBACK"):
        return "1.0"
    never_cited_after = int(conf.get("NEVER_CITED_AFTER"))
    return (
        "((1.0 + 0.5 * m.cite_count / (m.cite_count + 4.0))"
        f" * (CASE WHEN m.cite_count = 0 AND m.injection_count >= {never_cited_after}"
        " THEN 0.8 ELSE 1.0 END))"
    )


def memory_columns() -> str:
    quote = connection.ops.quote_name
    return ", ".join(f"m.{quote(f.column)}" for f in IdentityMemory._meta.concrete_fields)


@dataclass(frozen=True)
class _Match:
    sql: search.MatchSql
    score: str


def _match(query_text: str) -> _Match | None:
    vendor = connection.vendor
    terms = search.query_terms(query_text)
    if not terms or not search.search_supported(vendor):
        return None
    sql = search.match_sql(terms, vendor)
    return _Match(sql, f"({sql.score}) * {_feedback_factor()}")


def ranked_by_scope(
    *,
    user_id: int,
    project_id: int,
    ranking: str,
    query_text: str,
    limits: dict[str, int],
    condition: str = RECEIVABLE,
) -> dict[str, list[IdentityMemory]]:
    """Per scope, at most `limits[scope]` memories meeting `condition`, best first.

    Each carries `match_score` (its ranking score, lower is better; None when it came in as
    one of the newest). One `UNION ALL` query.
    """
    match = _match(query_text) if ranking == InjectionRanking.RELEVANT else None
    columns = memory_columns()
    parts: list[str] = []
    params: list = []
    for scope in SCOPES:
        if not limits.get(scope):
            continue
        if match is not None:
            # Rank narrow rows (id, score), then read the few chosen memories whole.
            parts.append(
                f"SELECT {columns}, '{scope}:match' AS injection_part, best.match_score"
                f" FROM (SELECT m.id AS id, {match.score} AS match_score"
                f" FROM {match.sql.from_sql} WHERE {match.sql.condition} AND {OWNER[scope]}"
                f" AND {condition} ORDER BY match_score, {NEWEST} LIMIT %s) AS best"
                " JOIN identity_memories m ON m.id = best.id"
            )
            owner = _owner_params(scope, user_id=user_id, project_id=project_id)
            params.extend([*match.sql.params, *owner, limits[scope]])
        parts.append(
            f"SELECT {columns}, '{scope}:recent' AS injection_part,"
            " CAST(NULL AS REAL) AS match_score"
            f" FROM identity_memories m WHERE {OWNER[scope]} AND {condition}"
            f" ORDER BY {NEWEST} LIMIT %s"
        )
        params.extend(
            [*_owner_params(scope, user_id=user_id, project_id=project_id), limits[scope]]
        )
    found: dict[str, list[IdentityMemory]] = {}
    if parts:
        sql = " UNION ALL ".join(
            f"SELECT * FROM ({part}) AS part{i}" for i, part in enumerate(parts)
        )
        for memory in IdentityMemory.objects.raw(sql, params):
            found.setdefault(memory.injection_part, []).append(memory)
    return {
        scope: _ranked(
            found.get(f"{scope}:match", []), found.get(f"{scope}:recent", []), limits.get(scope, 0)
        )
        for scope in SCOPES
    }


def memories_for_injection(
    *,
    user_id: int,
    project_id: int,
    ranking: str = "recent",
    query_text: str = "",
    personal: bool = True,
) -> tuple[list[IdentityMemory], list[IdentityMemory]]:
    """The memories a task's first turn receives, user-level (none unless `personal`) then
    project-level, best first (at most the injection limits of each scope)."""
    limits = injection_limits()
    if not personal:
        limits[MemoryScope.USER] = 0
    ranked = ranked_by_scope(
        user_id=user_id,
        project_id=project_id,
        ranking=ranking,
        query_text=query_text,
        limits=limits,
    )
    return ranked[MemoryScope.USER], ranked[MemoryScope.PROJECT]


def _owners(personal: bool) -> tuple[str, list[str]]:
    """The SQL of the memories a task may see in both scopes (just the project's when not
    `personal`) and the names of its parameters."""
    if not personal:
        return f"({OWNER[MemoryScope.PROJECT]})", ["project", "user"]
    return (
        f"(({OWNER[MemoryScope.USER]}) OR ({OWNER[MemoryScope.PROJECT]}))",
        ["user", "project", "user"],
    )


def memories_search(
    *, user_id: int, project_id: int, query_text: str, limit: int, personal: bool = True
) -> list[IdentityMemory]:
    """What the memory tool's search finds for a task: the memories it may receive (both
    scopes; project ones only unless `personal`) that match `query_text` best, ranked like
    `relevant` injection; the newest when the query has no searchable word. One query."""
    if limit <= 0:
        return []
    owners, names = _owners(personal)
    values = {"user": user_id, "project": project_id}
    owner_params = [values[name] for name in names]
    match = _match(query_text)
    columns = memory_columns()
    if match is None:
        sql = (
            f"SELECT {columns}, CAST(NULL AS REAL) AS match_score FROM identity_memories m"
            f" WHERE {owners} AND {RECEIVABLE} ORDER BY {NEWEST} LIMIT %s"
        )
        return list(IdentityMemory.objects.raw(sql, [*owner_params, limit]))
    sql = (
        f"SELECT {columns}, {match.score} AS match_score FROM {match.sql.from_sql}"
        f" WHERE {match.sql.condition} AND {owners} AND {RECEIVABLE}"
        f" ORDER BY match_score, {NEWEST} LIMIT %s"
    )
    params = [*match.sql.params, *owner_params, limit]
    return list(IdentityMemory.objects.raw(sql, params))


def memory_receivable(
    *, user_id: int, project_id: int, memory_id: int, personal: bool = True
) -> IdentityMemory | None:
    """The memory, if a task of the user in the project may receive it (the rule of
    injection and search); None otherwise, whether it exists or not. One query."""
    owners, names = _owners(personal)
    values = {"user": user_id, "project": project_id}
    sql = (
        f"SELECT {memory_columns()} FROM identity_memories m"
        f" WHERE m.id = %s AND {owners} AND {RECEIVABLE}"
    )
    found = list(IdentityMemory.objects.raw(sql, [memory_id, *(values[name] for name in names)]))
    return found[0] if found else None


def memories_matching(
    *,
    text: str,
    scope: str,
    limit: int,
    project_id: int | None = None,
    user_id: int | None = None,
    held_for: int | None = None,
    exclude_ids: Iterable[int] = (),
) -> list[IdentityMemory]:
    """Receivable memories of a scope whose content or keywords match `text`, best first.

    Filtered by `project_id` / `user_id` when given; project memories held for an author
    are left out unless `held_for` is that author. Each memory carries `match_score`
    (lower is better; BM25 on SQLite, minus `ts_rank_cd` on PostgreSQL, so only comparable
    within one database). Empty when `text` has no searchable word. One query.
    """
    vendor = connection.vendor
    terms = search.query_terms(text)
    if not terms or limit <= 0 or not search.search_supported(vendor):
        return []
    match = search.match_sql(terms, vendor)
    where = [match.condition, "m.scope = %s", RECEIVABLE]
    params: list = [*match.params, scope]
    if project_id is not None:
        where.append("m.project_id = %s")
        params.append(project_id)
    if user_id is not None:
        where.append("m.user_id = %s")
        params.append(user_id)
    where.append("(m.visibility = 'project' OR m.created_by_id = %s)")
    params.append(held_for if held_for is not None else 0)
    excluded = [int(pk) for pk in exclude_ids]
    if excluded:
        where.append(f"m.id NOT IN ({', '.join(['%s'] * len(excluded))})")
        params.extend(excluded)
    params.append(limit)
    sql = (
        f"SELECT {memory_columns()}, {match.score} AS match_score FROM {match.from_sql}"
        f" WHERE {' AND '.join(where)} ORDER BY match_score, {NEWEST} LIMIT %s"
    )
    return list(IdentityMemory.objects.raw(sql, params))


def _newest_first(memory: IdentityMemory) -> tuple:
    return (-memory.created_at.timestamp(), -memory.pk)


def _ranked(
    matches: list[IdentityMemory], newest: list[IdentityMemory], limit: int
) -> list[IdentityMemory]:
    """Matches by score (recency breaking ties), then the newest others up to `limit`."""
    ranked = sorted(matches, key=lambda m: (m.match_score, *_newest_first(m)))[:limit]
    chosen = {m.pk for m in ranked}
    for memory in sorted(newest, key=_newest_first):
        if len(ranked) >= limit:
            break
        if memory.pk not in chosen:
            ranked.append(memory)
            chosen.add(memory.pk)
    return ranked
