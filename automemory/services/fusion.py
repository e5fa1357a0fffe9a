"""Hybrid ranking: the full-text and the vector rankings of a scope's memories, fused.

Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): each list ranks its best
`CANDIDATES` memories, and a memory scores the sum over the lists it is in of
`1 / (RRF_K + rank)`, rank 1 being the best. `RRF_K = 60` is the paper's constant: it
flattens the head of each list, so a memory that both lists place well beats one that a
single list places first. Fusing ranks, not scores, needs no calibration between BM25 (or
`ts_rank_cd`) and cosine distances. The vector list keeps only memories within
`AUTOMEMORY_EMBEDDING_MAX_DISTANCE` of the task's text, so a task about nothing stored gets
no neighbours by meaning, as it gets no keyword match. The fused score is then multiplied by
the citation feedback factor (`automemory.ranking`), as a keyword score was.

The candidates of each ranking are common table expressions computed once per query and
scope, whatever number of lists read them; each fused list is a subquery of the ranking's
one query, on both databases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from automemory import conf
from automemory.services import embeddings, search, vectors

RRF_K = 60
CANDIDATES = 50
# Each list's weight in the sum: equal, as in the paper.
KEYWORD_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0


def task_vector(text: str) -> list[float] | None:
    """The vector of a task's text for ranking, or None when the text is blank, the model is
    off by choice (`AUTOMEMORY_EMBEDDING_MODEL = ""`), or the model or the store is
    unavailable (ranking then uses keywords; counted, logged once)."""
    if not text.strip() or not conf.get("EMBEDDING_MODEL"):
        return None
    problem = vectors.store_problem()
    if problem is not None:
        embeddings.fallback_record(where="ranking", reason=problem)
        return None
    return embeddings.query_vector(text)


@dataclass(frozen=True)
class Candidates:
    """A scope's candidates by each ranking, as common table expressions computed once per
    query and shared by every list read from them (the preview reads the receivable and the
    withheld): `keyword` (`id`, `created_at`, `score`, lower is better; None without a
    searchable word) and `nearest` (`id`, `distance`), each with a 0/1 column per condition
    (`ok0`, `ok1`...). `sql` is the expressions' text, `params` bind it."""

    keyword: str | None
    nearest: str
    sql: list[str]
    params: list


def candidates_sql(
    *,
    scope: str,
    owner: str,
    owner_params: Sequence,
    owner_id: int,
    conditions: Sequence[str],
    keyword: search.MatchSql | None,
    vector: Sequence[float],
) -> Candidates:
    """The scope's live memories matching the task's words (all of them: each list keeps
    its best `CANDIDATES` after its condition) and its `CANDIDATES` nearest by meaning
    within `AUTOMEMORY_EMBEDDING_MAX_DISTANCE` (`owner`: SQL on the memory table `m`)."""
    flags = ", ".join(
        f"CASE WHEN {condition} THEN 1 ELSE 0 END AS ok{i}"
        for i, condition in enumerate(conditions)
    )
    sql: list[str] = []
    params: list = []
    keyword_name = None
    if keyword is not None:
        keyword_name = f"keyword_{scope}"
        sql.append(
            f"{keyword_name} AS MATERIALIZED (SELECT m.id AS id, m.created_at AS created_at,"
            f" {keyword.score} AS score, {flags} FROM {keyword.from_sql}"
            f" WHERE {keyword.condition} AND {owner} AND m.status IN ('active', 'archived'))"
        )
        params.extend([*keyword.params, *owner_params])
    nearest = vectors.nearest_sql(vector=vector, scope=scope, owner_id=owner_id, depth=CANDIDATES)
    nearest_name = f"nearest_{scope}"
    sql.append(
        f"{nearest_name} AS MATERIALIZED (SELECT near.id AS id, near.distance AS distance,"
        f" {flags} FROM ({nearest.sql}) AS near JOIN identity_memories m ON m.id = near.id"
        f" WHERE near.distance <= %s AND {owner})"
    )
    params.extend([*nearest.params, float(conf.get("EMBEDDING_MAX_DISTANCE")), *owner_params])
    return Candidates(keyword_name, nearest_name, sql, params)


def fused_sql(
    *, candidates: Candidates, condition: int, feedback: str, newest: str, limit: int
) -> str:
    """A subquery of `id` and `match_score` (minus the fused score: lower is better) of the
    best `limit` candidates meeting condition number `condition`; `feedback` is the SQL
    factor of citation feedback, `newest` breaks ties. Binds nothing of its own but `limit`
    (appended by the caller)."""
    ok = f"ok{condition}"
    lists = []
    if candidates.keyword is not None:
        lists.append(
            f"SELECT kw.id AS id, {float(KEYWORD_WEIGHT)!r} AS weight, ROW_NUMBER() OVER"
            " (ORDER BY kw.score, kw.created_at DESC, kw.id DESC) AS rank FROM (SELECT k.id AS"
            f" id, k.created_at AS created_at, k.score AS score FROM {candidates.keyword} k"
            f" WHERE k.{ok} = 1 ORDER BY k.score, k.created_at DESC, k.id DESC"
            f" LIMIT {CANDIDATES}) AS kw"
        )
    lists.append(
        f"SELECT nn.id AS id, {float(VECTOR_WEIGHT)!r} AS weight,"
        " ROW_NUMBER() OVER (ORDER BY nn.distance, nn.id) AS rank"
        f" FROM {candidates.nearest} nn WHERE nn.{ok} = 1"
    )
    union = " UNION ALL ".join(f"SELECT * FROM ({part}) AS list{i}" for i, part in enumerate(lists))
    return (
        f"SELECT m.id AS id, CAST(-(fused.rrf * {feedback}) AS REAL) AS match_score"
        f" FROM (SELECT ranked.id AS id, SUM(ranked.weight / ({RRF_K} + ranked.rank)) AS rrf"
        f" FROM ({union}) AS ranked GROUP BY ranked.id) AS fused"
        f" JOIN identity_memories m ON m.id = fused.id ORDER BY match_score, {newest} LIMIT %s"
    )
