"""Full-text search over memories: FTS5 on SQLite, a tsvector column + GIN index on PostgreSQL.

The objects live on controlplane's `identity_memories` table but only automemory's ranking
reads them (automemory.services.search), so they are created here, by database vendor. The
SQL is spelled out (not imported) so this migration stays what it was when applied.
"""

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS identity_memories_fts USING fts5(
        content, keywords,
        content='identity_memories', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS identity_memories_fts_insert
    AFTER INSERT ON identity_memories BEGIN
        INSERT INTO identity_memories_fts(rowid, content, keywords)
        VALUES (new.id, new.content, new.keywords);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS identity_memories_fts_delete
    AFTER DELETE ON identity_memories BEGIN
        INSERT INTO identity_memories_fts(identity_memories_fts, rowid, content, keywords)
        VALUES ('delete', old.id, old.content, old.keywords);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS identity_memories_fts_update
    AFTER UPDATE OF content, keywords ON identity_memories BEGIN
        INSERT INTO identity_memories_fts(identity_memories_fts, rowid, content, keywords)
        VALUES ('delete', old.id, old.content, old.keywords);
        INSERT INTO identity_memories_fts(rowid, content, keywords)
        VALUES (new.id, new.content, new.keywords);
    END
    """,
    # Index the memories written before this migration.
    "INSERT INTO identity_memories_fts(identity_memories_fts) VALUES ('rebuild')",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS identity_memories_fts_insert",
    "DROP TRIGGER IF EXISTS identity_memories_fts_delete",
    "DROP TRIGGER IF EXISTS identity_memories_fts_update",
    "DROP TABLE IF EXISTS identity_memories_fts",
]
POSTGRESQL_CREATE = [
    # Stored, so ranking reads the vector instead of re-parsing every matching memory.
    """
    ALTER TABLE identity_memories ADD COLUMN IF NOT EXISTS search_document tsvector
    GENERATED ALWAYS AS (
        to_tsvector('english'::regconfig, content || ' ' || keywords::text)
    ) STORED
    """,
    """
    CREATE INDEX IF NOT EXISTS memory_search_document_gin
    ON identity_memories USING gin (search_document)
    """,
]
POSTGRESQL_DROP = [
    "DROP INDEX IF EXISTS memory_search_document_gin",
    "ALTER TABLE identity_memories DROP COLUMN IF EXISTS search_document",
]


def _run(schema_editor, by_vendor):
    for statement in by_vendor.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


def search_create(apps, schema_editor):
    _run(schema_editor, {"sqlite": SQLITE_CREATE, "postgresql": POSTGRESQL_CREATE})


def search_drop(apps, schema_editor):
    _run(schema_editor, {"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_DROP})


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0006_ranking_budget_retention_model_reasons"),
        ("controlplane", "0010_memory_usage_flags_archive_sources"),
    ]

    operations = [migrations.RunPython(search_create, search_drop)]
