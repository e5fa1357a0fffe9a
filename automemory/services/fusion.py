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

Everything is one SQL subquery, on both databases, read inside the ranking's one query.
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
    """The vector of a task's text for ranking, or None when the text is blank or the
    model or the store is unavailable (ranking then uses keywords; counted, logged once)."""
    if not text.strip():
        return None
    problem = vectors.store_problem()
    if problem is not None:
        embeddings.fallback_record(where="ranking", reason=problem)
        return None
    return embeddings.query_vector(text)


@dataclass(frozen=True)
class FusedSql:
    """A subquery of `id` and `match_score` (minus the fused score: lower is better), the
    best `limit` first; `params` bind it in order."""

    sql: str
    params: tuple


def fused_sql(
    *,
    keyword: search.MatchSql | None,
    vector: Sequence[float],
    scope: str,
    owner_id: int,
    where: str,
    where_params: Sequence,
    feedback: str,
    newest: str,
    limit: int,
) -> FusedSql:
    """The best `limit` memories of a scope by both rankings fused. `where` (on the memory
    table `m`, bound by `where_params`) says which memories may rank; `keyword` is the
    full-text match of the task's words (None when it has no searchable word); `feedback`
    is the SQL factor of citation feedback; `newest` breaks ties."""
    depth = max(CANDIDATES, limit)
    lists: list[str] = []
    params: list = []
    if keyword is not None:
        lists.append(
            f"SELECT kw.id AS id, {float(KEYWORD_WEIGHT)!r} AS weight, ROW_NUMBER() OVER"
            " (ORDER BY kw.score, kw.created_at DESC, kw.id DESC) AS rank"
            " FROM (SELECT m.id AS id, m.created_at AS created_at,"
            f" {keyword.score} AS score FROM {keyword.from_sql} WHERE {keyword.condition}"
            f" AND {where} ORDER BY score, {newest} LIMIT %s) AS kw"
        )
        params.extend([*keyword.params, *where_params, depth])
    nearest = vectors.nearest_sql(vector=vector, scope=scope, owner_id=owner_id, depth=depth)
    lists.append(
        f"SELECT nn.id AS id, {float(VECTOR_WEIGHT)!r} AS weight,"
        " ROW_NUMBER() OVER (ORDER BY nn.distance, nn.id) AS rank FROM"
        " (SELECT near.id AS id, near.distance AS distance"
        f" FROM ({nearest.sql}) AS near JOIN identity_memories m ON m.id = near.id"
        f" WHERE near.distance <= %s AND {where}) AS nn"
    )
    params.extend([*nearest.params, float(conf.get("EMBEDDING_MAX_DISTANCE")), *where_params])
    union = " UNION ALL ".join(f"SELECT * FROM ({part}) AS list{i}" for i, part in enumerate(lists))
    sql = (
        f"SELECT m.id AS id, CAST(-(fused.rrf * {feedback}) AS REAL) AS match_score"
        f" FROM (SELECT ranked.id AS id, SUM(ranked.weight / ({RRF_K} + ranked.rank)) AS rrf"
        f" FROM ({union}) AS ranked GROUP BY ranked.id) AS fused"
        f" JOIN identity_memories m ON m.id = fused.id ORDER BY match_score, {newest} LIMIT %s"
    )
    params.append(limit)
    return FusedSql(sql, tuple(params))
