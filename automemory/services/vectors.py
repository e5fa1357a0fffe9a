"""The memories' vectors on the database's own engine, and the pass that writes them.

PostgreSQL: pgvector, a `vector(384)` column on `automemory_memory_embeddings` and an HNSW
index (cosine), searched with `hnsw.iterative_scan` so a narrow owner still gets its
nearest memories. SQLite: sqlite-vec, loaded into every connection; the vector as a float32
BLOB and its sign bits (48 bytes) in a covering index per owner, so the nearest are found by
Hamming distance over the index and re-scored by cosine distance over a few hundred rows.

`vector_store_ensure` (after every `migrate`) creates the extension, the column, the indexes
and the triggers that keep a row per memory (pending when the memory is written or its
content changes, its owner copied). Without the extension nothing fails: the store is
unavailable, ranking uses keywords, and `manage.py check --deploy` says what is missing.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from automemory import conf
from automemory.services import embeddings

logger = logging.getLogger(__name__)

TABLE = "automemory_memory_embeddings"
COPIED = "scope, status, project_id, user_id"
# On SQLite: how many rows the Hamming pre-selection keeps per wanted nearest memory.
PRESELECT_FACTOR = 4
# How long an unavailable store is believed before it is looked at again.
RECHECK_SECONDS = 60.0

_TRIGGER_NAMES = (
    "memory_embedding_insert",
    "memory_embedding_content",
    "memory_embedding_owner",
    "memory_embedding_delete",
)
_BACKFILL = (
    f"INSERT INTO {TABLE} (memory_id, {COPIED}, pending, model)"
    f" SELECT m.id, m.scope, m.status, m.project_id, m.user_id, TRUE, ''"
    f" FROM identity_memories m"
    f" WHERE NOT EXISTS (SELECT 1 FROM {TABLE} e WHERE e.memory_id = m.id)"
)
_SQLITE_SETUP = [
    f"""
    CREATE TRIGGER IF NOT EXISTS memory_embedding_insert
    AFTER INSERT ON identity_memories BEGIN
        INSERT INTO {TABLE} (memory_id, {COPIED}, pending, model)
        VALUES (new.id, new.scope, new.status, new.project_id, new.user_id, 1, '')
        ON CONFLICT (memory_id) DO UPDATE SET pending = 1;
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS memory_embedding_content
    AFTER UPDATE OF content ON identity_memories WHEN old.content IS NOT new.content BEGIN
        UPDATE {TABLE} SET pending = 1 WHERE memory_id = new.id;
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS memory_embedding_owner
    AFTER UPDATE OF scope, status, project_id, user_id ON identity_memories BEGIN
        UPDATE {TABLE} SET scope = new.scope, status = new.status,
            project_id = new.project_id, user_id = new.user_id
        WHERE memory_id = new.id;
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS memory_embedding_delete
    AFTER DELETE ON identity_memories BEGIN
        DELETE FROM {TABLE} WHERE memory_id = old.id;
    END
    """,
]
_SQLITE_COLUMNS = {"embedding": "BLOB", "embedding_bits": "BLOB"}
_SQLITE_INDEXES = [
    f"""
    CREATE INDEX IF NOT EXISTS memory_embedding_{scope}_bits
    ON {TABLE} ({scope}_id, model, embedding_bits)
    WHERE scope = '{scope}' AND status IN ('active', 'archived') AND embedding_bits IS NOT NULL
    """
    for scope in ("project", "user")
]
_POSTGRESQL_TRIGGER = [
    f"""
    CREATE OR REPLACE FUNCTION automemory_memory_embedding_sync() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            DELETE FROM {TABLE} WHERE memory_id = OLD.id;
        ELSIF TG_OP = 'INSERT' THEN
            INSERT INTO {TABLE} (memory_id, {COPIED}, pending, model)
            VALUES (NEW.id, NEW.scope, NEW.status, NEW.project_id, NEW.user_id, TRUE, '')
            ON CONFLICT (memory_id) DO UPDATE SET pending = TRUE;
        ELSE
            UPDATE {TABLE} SET scope = NEW.scope, status = NEW.status,
                project_id = NEW.project_id, user_id = NEW.user_id,
                pending = pending OR OLD.content IS DISTINCT FROM NEW.content
            WHERE memory_id = NEW.id;
        END IF;
        RETURN NULL;
    END $$
    """,
    """
    CREATE OR REPLACE TRIGGER memory_embedding_sync
    AFTER INSERT OR DELETE OR UPDATE OF content, scope, status, project_id, user_id
    ON identity_memories FOR EACH ROW EXECUTE FUNCTION automemory_memory_embedding_sync()
    """,
]
_POSTGRESQL_VECTOR = [
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS embedding vector({embeddings.DIMENSIONS})",
    f"""
    CREATE INDEX IF NOT EXISTS memory_embedding_hnsw
    ON {TABLE} USING hnsw (embedding vector_cosine_ops)
    """,
]


def vector_store_ensure(*, using: str = "default", **_kwargs) -> None:
    """Create what the store needs and is missing: triggers, a row per memory, and, where
    the extension can be had, the vector column and its index. Idempotent; run after every
    `migrate` (post_migrate), so a store whose extension was installed later is completed."""
    connection = connections[using]
    if connection.vendor not in ("sqlite", "postgresql"):
        return
    tables = connection.introspection.table_names()
    if TABLE not in tables or "identity_memories" not in tables:
        return  # not migrated this far yet
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for statement in _SQLITE_SETUP:
                cursor.execute(statement)
            present = {row[1] for row in cursor.execute(f"PRAGMA table_info({TABLE})")}
            for name, kind in _SQLITE_COLUMNS.items():
                if name not in present:
                    cursor.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}")
            for statement in _SQLITE_INDEXES:
                cursor.execute(statement)
        else:
            for statement in _POSTGRESQL_TRIGGER:
                cursor.execute(statement)
            _postgresql_vector_ensure(connection)
        cursor.execute(_BACKFILL)
    _available[using] = (_column_problem(connection), time.monotonic() + RECHECK_SECONDS)


def _postgresql_vector_ensure(connection: BaseDatabaseWrapper) -> None:
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for statement in _POSTGRESQL_VECTOR:
                cursor.execute(statement)
    except DatabaseError as exc:
        logger.warning(
            "pgvector is not available (%s): memories are ranked by keywords alone until it "
            "is installed and `migrate` runs again",
            str(exc).strip().splitlines()[0],
        )


def sqlite_vec_load(sender=None, connection: BaseDatabaseWrapper | None = None, **_kwargs):
    """Load sqlite-vec into a new SQLite connection (connection_created); a Python without
    loadable extensions, or no sqlite-vec, leaves the store unavailable."""
    if connection is None or connection.vendor != "sqlite":
        return
    raw = connection.connection
    try:
        import sqlite_vec

        raw.enable_load_extension(True)
        try:
            sqlite_vec.load(raw)
        finally:
            raw.enable_load_extension(False)
    except Exception as exc:  # no sqlite_vec, no loadable extensions, a broken library
        connection.sqlite_vec_problem = f"sqlite-vec cannot be loaded: {exc}"
    else:
        connection.sqlite_vec_problem = None


_available: dict[str, tuple[str | None, float]] = {}


def store_problem(*, using: str = "default", fresh: bool = False) -> str | None:
    """Why this database cannot hold or search memory vectors, or None when it can. The
    answer is kept per process (a problem for a minute); `fresh` looks again."""
    connection = connections[using]
    problem = _vendor_problem(connection)
    if problem:
        return problem
    cached = None if fresh else _available.get(using)
    if cached is not None and (cached[0] is None or time.monotonic() < cached[1]):
        return cached[0]
    problem = _column_problem(connection)
    _available[using] = (problem, time.monotonic() + RECHECK_SECONDS)
    return problem


def deploy_problem(*, using: str = "default") -> str | None:
    """What a deploy lacks for memory vectors, looked at afresh: the extension (sqlite-vec
    loadable, pgvector available on the server) and, once migrated, the vector column. An
    unmigrated database is not a problem here: `migrate` creates the store."""
    connection = connections[using]
    problem = _vendor_problem(connection)
    if problem:
        return problem
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cursor.fetchone() is None:
                return (
                    "the pgvector extension is not installed on the database server (install "
                    "the postgresql-<major>-pgvector package)"
                )
    if TABLE not in connection.introspection.table_names():
        return None
    return _column_problem(connection)


def _vendor_problem(connection: BaseDatabaseWrapper) -> str | None:
    """SQLite without sqlite-vec loaded, or a database other than SQLite and PostgreSQL."""
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        return getattr(connection, "sqlite_vec_problem", "sqlite-vec was not loaded")
    if connection.vendor != "postgresql":
        return f"no vector store for database vendor {connection.vendor!r}"
    return None


def _column_problem(connection: BaseDatabaseWrapper) -> str | None:
    """Whether the vector column exists (one query)."""
    if connection.vendor == "sqlite":
        sql = f"SELECT 1 FROM pragma_table_info('{TABLE}') WHERE name = 'embedding'"
    else:
        sql = (
            f"SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{TABLE}')"
            " AND attname = 'embedding' AND NOT attisdropped"
        )
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            present = cursor.fetchone() is not None
    except DatabaseError as exc:
        return f"the embeddings table cannot be read: {exc}"
    if present:
        return None
    if connection.vendor == "postgresql":
        return (
            "the pgvector extension is not installed in this database (install the "
            "postgresql-<major>-pgvector package, then run `manage.py migrate`)"
        )
    return "the embeddings table has no vector column (run `manage.py migrate`)"


def vector_param(vector: Sequence[float], vendor: str):
    """A vector as a query parameter: float32 bytes for sqlite-vec, pgvector's text form."""
    if vendor == "sqlite":
        return struct.pack(f"<{len(vector)}f", *vector)
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def sign_bits(vector: Sequence[float]) -> bytes:
    """One bit per dimension, set where the value is positive, least significant bit
    first: what sqlite-vec's `vec_quantize_binary` stores, computed once per query instead
    of once per row."""
    packed = bytearray((len(vector) + 7) // 8)
    for index, value in enumerate(vector):
        if value > 0:
            packed[index // 8] |= 1 << (index % 8)
    return bytes(packed)


@dataclass(frozen=True)
class NearestSql:
    """A subquery of a scope's memories nearest a vector: columns `id` and `distance`
    (cosine distance, lower is nearer), at most `depth` rows, nearest first. `params` bind
    it in order."""

    sql: str
    params: tuple


def nearest_sql(*, vector: Sequence[float], scope: str, owner_id: int, depth: int) -> NearestSql:
    """The `depth` memories of a user (scope `user`) or project (`project`) whose vectors,
    written by the current model, are nearest `vector`; live ones only (active or archived).
    Visibility and holds are the caller's to filter."""
    vendor = connections["default"].vendor
    model = embeddings.model_name() or ""
    param = vector_param(vector, vendor)
    if scope not in ("user", "project"):
        raise ValueError(f"unknown memory scope {scope!r}")
    # The scope is spelled out: SQLite uses a partial index only for a literal it can check.
    owner = f"e.scope = '{scope}' AND e.{scope}_id = %s AND e.model = %s"
    if vendor == "postgresql":
        return NearestSql(
            f"SELECT e.memory_id AS id, e.embedding <=> %s::vector AS distance FROM {TABLE} e"
            f" WHERE {owner} AND e.status IN ('active', 'archived')"
            " AND e.embedding IS NOT NULL ORDER BY distance LIMIT %s",
            (param, owner_id, model, depth),
        )
    return NearestSql(
        f"SELECT e.memory_id AS id, vec_distance_cosine(e.embedding, %s) AS distance"
        f" FROM {TABLE} e WHERE e.memory_id IN (SELECT e.memory_id FROM {TABLE} e"
        f" INDEXED BY memory_embedding_{scope}_bits"
        f" WHERE {owner} AND e.status IN ('active', 'archived') AND e.embedding_bits IS NOT NULL"
        " ORDER BY vec_distance_hamming(vec_bit(e.embedding_bits), vec_bit(%s))"
        " LIMIT %s) ORDER BY distance LIMIT %s",
        (param, owner_id, model, sign_bits(vector), depth * PRESELECT_FACTOR, depth),
    )


def connection_prepare(sender=None, connection: BaseDatabaseWrapper | None = None, **_kwargs):
    """Per new connection (connection_created): sqlite-vec on SQLite; on PostgreSQL, HNSW
    scans that go on past rows the owner filter drops (pgvector 0.8's iterative scans)."""
    if connection is None:
        return
    if connection.vendor == "sqlite":
        sqlite_vec_load(connection=connection)
    elif connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET hnsw.iterative_scan = 'relaxed_order'")


@dataclass
class EmbeddingPass:
    """What one embedding pass did: memories embedded, and whether the model or the store
    was unavailable (the rest stays pending)."""

    embedded: int = 0
    seconds: float = 0.0
    unavailable: str | None = None


def embeddings_refresh(*, limit: int | None = None, batch_size: int | None = None) -> EmbeddingPass:
    """Embed up to `limit` pending memories, `batch_size` per model call, oldest first.

    A vector is written only if the memory's content is still what was embedded; one whose
    content changed meanwhile stays pending for the next pass. The sweeper runs it after
    each sweep; nothing pending costs one indexed query.
    """
    outcome = EmbeddingPass()
    if not conf.get("EMBEDDING_MODEL"):
        return outcome  # ranking by words alone, by choice: nothing to embed
    limit = int(limit if limit is not None else conf.get("EMBEDDING_PASS_MAX"))
    batch_size = int(batch_size if batch_size is not None else conf.get("EMBEDDING_BATCH_SIZE"))
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.memory_id, m.content FROM {TABLE} e"
            " JOIN identity_memories m ON m.id = e.memory_id"
            " WHERE e.pending ORDER BY e.memory_id LIMIT %s",
            [limit],
        )
        pending = cursor.fetchall()
    if not pending:
        return outcome
    problem = store_problem()
    if problem is not None:
        embeddings.fallback_record(where="embedding_pass", reason=problem)
        outcome.unavailable = problem
        return outcome
    started = time.perf_counter()
    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        vectors = embeddings.passage_vectors([content for _, content in batch])
        if vectors is None:
            outcome.unavailable = embeddings.unavailable_reason() or "the embedding model failed"
            break
        _vectors_write(batch, vectors)
        outcome.embedded += len(batch)
    outcome.seconds = time.perf_counter() - started
    return outcome


def _vectors_write(batch: list[tuple[int, str]], vectors: list[list[float]]) -> None:
    connection = connections["default"]
    vendor = connection.vendor
    model = embeddings.model_name() or ""
    now = timezone.now()
    if vendor == "sqlite":
        assign = "embedding = %s, embedding_bits = vec_quantize_binary(%s)"
    else:
        assign = "embedding = %s::vector"
    sql = (
        f"UPDATE {TABLE} SET {assign}, model = %s, embedded_at = %s, pending = FALSE"
        f" WHERE memory_id = %s AND EXISTS (SELECT 1 FROM identity_memories m"
        f" WHERE m.id = {TABLE}.memory_id AND m.content = %s)"
    )
    rows = []
    for (memory_id, content), vector in zip(batch, vectors, strict=True):
        param = vector_param(vector, vendor)
        vector_params = [param, param] if vendor == "sqlite" else [param]
        rows.append([*vector_params, model, now, memory_id, content])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)
