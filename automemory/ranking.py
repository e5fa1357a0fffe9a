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
from automemory.services import fusion, search
from automemory.services.citations import store as citation_store
from controlplane.models import IdentityMemory, MemoryScope

# Auto memory's own row of a memory (`MemoryState`: usage counters, report hold), read by
# the memory's id; a memory without one has zero counts and no hold.
STATE = "automemory_memory_state"


def _state(column: str, default: str) -> str:
    """SQL of one `MemoryState` value of the memory `m` (one primary-key probe)."""
    return f"COALESCE((SELECT s.{column} FROM {STATE} s WHERE s.memory_id = m.id), {default})"


# Held for review: flagged as instruction-like and not approved, or reported and not
# reviewed yet (both auto memory's, in its own row: one primary-key probe).
HELD = (
    f"EXISTS (SELECT 1 FROM {STATE} s WHERE s.memory_id = m.id"
    " AND ((s.flagged AND s.approved_at IS NULL) OR s.report_hold_at IS NOT NULL))"
)
# What a task may receive (the SQL alias of the memory table is `m`).
NOT_HELD = f"NOT {HELD}"
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
    cites, injections = _state("cite_count", "0"), _state("injection_count", "0")
    return (
        f"((1.0 + 0.5 * {cites} / ({cites} + 4.0))"
        f" * (CASE WHEN {cites} = 0 AND {injections} >= {never_cited_after}"
        " THEN 0.8 ELSE 1.0 END))"
    )


def memory_columns() -> str:
    """The memory's columns, and since when a report holds it (`report_hold_at`, None when
    none does: the preview's reason for a withheld memory)."""
    quote = connection.ops.quote_name
    columns = [f"m.{quote(f.column)}" for f in IdentityMemory._meta.concrete_fields]
    columns.append(f"{_state('report_hold_at', 'NULL')} AS report_hold_at")
    return ", ".join(columns)


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


@dataclass(frozen=True)
class Wanted:
    """One ranked list a read returns: at most `limit` memories of `scope` meeting
    `condition`, the newest filling what matches leave free unless not `fill`.
    `recent_window`, when set, bounds the newest that fill free slots to those
    among the scope's `recent_window` newest live memories, so a condition few memories meet
    (held ones) costs an index range, never a scan of every memory."""

    scope: str
    condition: str
    limit: int
    recent_window: int | None = None
    # Whether the newest fill the slots matches leave free (search returns matches only).
    fill: bool = True


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
    read = ranked_read(
        user_id=user_id,
        project_id=project_id,
        ranking=ranking,
        query_text=query_text,
        wanted=[Wanted(scope, condition, limit) for scope, limit in limits.items()],
    )
    return {scope: read.get((scope, condition), []) for scope in SCOPES}


def ranked_read(
    *,
    user_id: int,
    project_id: int,
    ranking: str,
    query_text: str,
    wanted: list[Wanted],
) -> dict[tuple[str, str], list[IdentityMemory]]:
    """Each list wanted, by (scope, condition), best first, in one `UNION ALL` query: with
    `relevant`, the best matches (both rankings fused when the task's text has a vector,
    `automemory.services.fusion`; else full text) and the newest filling free slots; with
    `recent`, the newest. Each memory carries `match_score` (lower is better; None when it
    came in as one of the newest)."""
    relevant = ranking == InjectionRanking.RELEVANT
    match = _match(query_text) if relevant else None
    vector = fusion.task_vector(query_text) if relevant else None
    columns = memory_columns()
    parts: list[str] = []
    params: list = []
    ctes: list[str] = []
    cte_params: list = []
    candidates: dict[str, tuple[fusion.Candidates, list[str]]] = {}
    if vector is not None:
        for scope in dict.fromkeys(want.scope for want in wanted if want.limit):
            conditions = list(dict.fromkeys(w.condition for w in wanted if w.scope == scope))
            found_in = fusion.candidates_sql(
                scope=scope,
                owner=OWNER[scope],
                owner_params=_owner_params(scope, user_id=user_id, project_id=project_id),
                owner_id=user_id if scope == MemoryScope.USER else project_id,
                conditions=conditions,
                keyword=match.sql if match is not None else None,
                vector=vector,
            )
            candidates[scope] = (found_in, conditions)
            ctes += found_in.sql
            cte_params += found_in.params
    for want in wanted:
        scope, condition, limit = want.scope, want.condition, want.limit
        if not limit:
            continue
        owner = _owner_params(scope, user_id=user_id, project_id=project_id)
        label = f"{scope}:{_CONDITION_LABELS.get(condition, condition)}"
        if vector is not None:
            found_in, conditions = candidates[scope]
            fused = fusion.fused_sql(
                candidates=found_in,
                condition=conditions.index(condition),
                feedback=_feedback_factor(),
                newest=NEWEST,
                limit=limit,
            )
            parts.append(
                f"SELECT {columns}, '{label}:match' AS injection_part, best.match_score"
                f" FROM ({fused}) AS best JOIN identity_memories m ON m.id = best.id"
            )
            params.append(limit)
        elif match is not None:
            # Rank narrow rows (id, score), then read the few chosen memories whole.
            parts.append(
                f"SELECT {columns}, '{label}:match' AS injection_part, best.match_score"
                f" FROM (SELECT m.id AS id, {match.score} AS match_score"
                f" FROM {match.sql.from_sql} WHERE {match.sql.condition} AND {OWNER[scope]}"
                f" AND {condition} ORDER BY match_score, {NEWEST} LIMIT %s) AS best"
                " JOIN identity_memories m ON m.id = best.id"
            )
            params.extend([*match.sql.params, *owner, limit])
        if not want.fill and (match is not None or vector is not None):
            continue
        source = "identity_memories m"
        if want.recent_window is not None:
            source = (
                f"(SELECT * FROM identity_memories m WHERE {OWNER[scope]}"
                f" AND m.status IN ('active', 'archived') ORDER BY {NEWEST} LIMIT %s) AS m"
            )
            params.extend([*owner, want.recent_window])
        parts.append(
            f"SELECT {columns}, '{label}:recent' AS injection_part,"
            " CAST(NULL AS REAL) AS match_score"
            f" FROM {source} WHERE {OWNER[scope]} AND {condition}"
            f" ORDER BY {NEWEST} LIMIT %s"
        )
        params.extend([*owner, limit])
    found: dict[str, list[IdentityMemory]] = {}
    if parts:
        # With each memory chosen, its code citations and branch scope, read for the chosen
        # rows only (`automemory.services.citations`).
        sql = " UNION ALL ".join(
            f"SELECT part{i}.*, {citation_store.folded_columns(f'part{i}')}"
            f" FROM ({part}) AS part{i}"
            for i, part in enumerate(parts)
        )
        if ctes:
            sql = f"WITH {', '.join(ctes)} {sql}"
            params = [*cte_params, *params]
        for memory in IdentityMemory.objects.raw(sql, params):
            found.setdefault(memory.injection_part, []).append(memory)
    result = {}
    for want in wanted:
        label = f"{want.scope}:{_CONDITION_LABELS.get(want.condition, want.condition)}"
        result[(want.scope, want.condition)] = _ranked(
            found.get(f"{label}:match", []), found.get(f"{label}:recent", []), want.limit
        )
    return result


_CONDITION_LABELS = {RECEIVABLE: "receivable", WITHHELD: "withheld"}


@dataclass(frozen=True)
class InjectionCandidates:
    """Per scope: the memories a first turn receives (`received`, best first), and when
    explained, the next best that its limit leaves out (`below`) and the best of those held
    or archived (`withheld`)."""

    received: dict[str, list[IdentityMemory]]
    below: dict[str, list[IdentityMemory]]
    withheld: dict[str, list[IdentityMemory]]


def injection_candidates(
    *,
    user_id: int,
    project_id: int,
    ranking: str = "recent",
    query_text: str = "",
    personal: bool = True,
    explain: int = 0,
) -> InjectionCandidates:
    """The memories a task's first turn receives, user-level (none unless `personal`) then
    project-level, best first (at most the injection limits of each scope); with `explain`,
    also up to that many per scope ranked below the limit and held or archived. One query
    either way: the received ones are those an unexplained read returns."""
    limits = injection_limits()
    if not personal:
        limits[MemoryScope.USER] = 0
    wanted = [Wanted(scope, RECEIVABLE, limit + explain) for scope, limit in limits.items()]
    if explain:
        wanted += [
            Wanted(scope, WITHHELD, explain, recent_window=limit + 2 * explain)
            for scope, limit in limits.items()
            if limit
        ]
    read = ranked_read(
        user_id=user_id,
        project_id=project_id,
        ranking=ranking,
        query_text=query_text,
        wanted=wanted,
    )
    ranked = {scope: read.get((scope, RECEIVABLE), []) for scope in SCOPES}
    return InjectionCandidates(
        received={scope: ranked[scope][: limits.get(scope, 0)] for scope in SCOPES},
        below={scope: ranked[scope][limits.get(scope, 0) :] for scope in SCOPES},
        withheld={scope: read.get((scope, WITHHELD), []) for scope in SCOPES},
    )


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
    `relevant` injection (by keywords and meaning fused); the newest when the query has no
    searchable word and no vector. One query."""
    if limit <= 0:
        return []
    scopes = SCOPES if personal else (MemoryScope.PROJECT,)
    read = ranked_read(
        user_id=user_id,
        project_id=project_id,
        ranking=InjectionRanking.RELEVANT,
        query_text=query_text,
        wanted=[Wanted(scope, RECEIVABLE, limit, fill=False) for scope in scopes],
    )
    found = [memory for scope in scopes for memory in read.get((scope, RECEIVABLE), [])]
    return sorted(found, key=_best_first)[:limit]


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


def _best_first(memory: IdentityMemory) -> tuple:
    """Matches by score (recency breaking ties), then the newest."""
    score = memory.match_score
    return (score is None, score if score is not None else 0.0, *_newest_first(memory))


def _ranked(
    matches: list[IdentityMemory], newest: list[IdentityMemory], limit: int
) -> list[IdentityMemory]:
    """Matches by score (recency breaking ties), then the newest others up to `limit`."""
    ranked = sorted(matches, key=_best_first)[:limit]
    chosen = {m.pk for m in ranked}
    for memory in sorted(newest, key=_newest_first):
        if len(ranked) >= limit:
            break
        if memory.pk not in chosen:
            ranked.append(memory)
            chosen.add(memory.pk)
    return ranked
