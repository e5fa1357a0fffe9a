"""The full-text index over a memory's content (the host's) and keywords (auto memory's),
kept by triggers on both tables in the statement that changes either.

SQLite: an FTS5 table `automemory_memory_fts` (rowid = the memory's id, porter stemming)
holding both texts. PostgreSQL: a `document` tsvector column of `automemory_memory_search`
(English configuration) with a GIN index, computed by a trigger when the row is written.
On both, the host's insert of a memory creates its search row, a change of its content
re-indexes it, and its delete removes the row. SQLite drops a table's triggers when a
migration rebuilds it; `automemory.services.search.search_index_ensure` brings them back
after every `migrate`.
"""

from django.db import migrations

FTS = "automemory_memory_fts"
SEARCH = "automemory_memory_search"

# --- SQLite ---------------------------------------------------------------------------------
# The triggers on auto memory's table never name the host's: SQLite re-reads every trigger
# when a migration rebuilds a table (drop, then rename a copy), and one naming the dropped
# table would fail the rename.
SQLITE_TABLE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS} USING fts5("
    "content, keywords, tokenize='porter unicode61 remove_diacritics 2')"
)
# Every memory gets its row, and the index is written afresh from both tables.
SQLITE_FILL = (
    f"INSERT OR IGNORE INTO {SEARCH} (memory_id, keywords) SELECT id, '[]' FROM identity_memories",
    f"DELETE FROM {FTS}",
    f"INSERT INTO {FTS}(rowid, content, keywords) SELECT m.id, m.content, s.keywords"
    f" FROM identity_memories m JOIN {SEARCH} s ON s.memory_id = m.id",
)
SQLITE_TRIGGERS = {
    "automemory_memory_search_insert": (
        "AFTER INSERT ON identity_memories BEGIN"
        f" INSERT INTO {FTS}(rowid, content, keywords) VALUES (new.id, new.content, '[]');"
        f" INSERT OR IGNORE INTO {SEARCH} (memory_id, keywords) VALUES (new.id, '[]'); END"
    ),
    "automemory_memory_search_content": (
        "AFTER UPDATE OF content ON identity_memories BEGIN"
        f" UPDATE {FTS} SET content = new.content WHERE rowid = new.id; END"
    ),
    "automemory_memory_search_delete": (
        "AFTER DELETE ON identity_memories BEGIN"
        f" DELETE FROM {FTS} WHERE rowid = old.id;"
        f" DELETE FROM {SEARCH} WHERE memory_id = old.id; END"
    ),
    "automemory_memory_fts_insert": (
        f"AFTER INSERT ON {SEARCH} BEGIN"
        f" UPDATE {FTS} SET keywords = new.keywords WHERE rowid = new.memory_id; END"
    ),
    "automemory_memory_fts_update": (
        f"AFTER UPDATE OF keywords ON {SEARCH} BEGIN"
        f" UPDATE {FTS} SET keywords = new.keywords WHERE rowid = new.memory_id; END"
    ),
    "automemory_memory_fts_delete": (
        f"AFTER DELETE ON {SEARCH} BEGIN"
        f" UPDATE {FTS} SET keywords = '[]' WHERE rowid = old.memory_id; END"
    ),
}
SQLITE_CREATE = (
    SQLITE_TABLE,
    *SQLITE_FILL,
    *(f"CREATE TRIGGER IF NOT EXISTS {name} {body}" for name, body in SQLITE_TRIGGERS.items()),
)
SQLITE_DROP = (
    *(f"DROP TRIGGER IF EXISTS {name}" for name in SQLITE_TRIGGERS),
    f"DROP TABLE IF EXISTS {FTS}",
)

# --- PostgreSQL -----------------------------------------------------------------------------
POSTGRESQL_CREATE = (
    f"ALTER TABLE {SEARCH} ADD COLUMN IF NOT EXISTS document tsvector",
    f"CREATE INDEX IF NOT EXISTS automemory_memory_search_gin ON {SEARCH} USING gin (document)",
    # The document of the row being written: the memory's content and the row's keywords.
    "CREATE OR REPLACE FUNCTION automemory_memory_search_document() RETURNS trigger AS $$"
    " BEGIN NEW.document := to_tsvector('english'::regconfig, coalesce("
    "  (SELECT content FROM identity_memories WHERE id = NEW.memory_id), '')"
    "  || ' ' || NEW.keywords::text);"
    " RETURN NEW; END $$ LANGUAGE plpgsql",
    f"DROP TRIGGER IF EXISTS automemory_memory_search_document ON {SEARCH}",
    "CREATE TRIGGER automemory_memory_search_document"
    f" BEFORE INSERT OR UPDATE ON {SEARCH} FOR EACH ROW"
    " EXECUTE FUNCTION automemory_memory_search_document()",
    # The host's memory: its insert creates the row, a content change rewrites the row (its
    # document follows), its delete removes the row.
    "CREATE OR REPLACE FUNCTION automemory_memory_search_follow() RETURNS trigger AS $$"
    " BEGIN"
    "  IF TG_OP = 'INSERT' THEN"
    f"   INSERT INTO {SEARCH} (memory_id, keywords) VALUES (NEW.id, '[]'::jsonb)"
    "    ON CONFLICT (memory_id) DO NOTHING;"
    "  ELSIF TG_OP = 'UPDATE' THEN"
    f"   UPDATE {SEARCH} SET keywords = keywords WHERE memory_id = NEW.id;"
    "  ELSE"
    f"   DELETE FROM {SEARCH} WHERE memory_id = OLD.id;"
    "  END IF;"
    "  RETURN NULL;"
    " END $$ LANGUAGE plpgsql",
    "DROP TRIGGER IF EXISTS automemory_memory_search_follow ON identity_memories",
    "CREATE TRIGGER automemory_memory_search_follow"
    " AFTER INSERT OR DELETE ON identity_memories FOR EACH ROW"
    " EXECUTE FUNCTION automemory_memory_search_follow()",
    "DROP TRIGGER IF EXISTS automemory_memory_search_content ON identity_memories",
    "CREATE TRIGGER automemory_memory_search_content"
    " AFTER UPDATE OF content ON identity_memories FOR EACH ROW"
    " WHEN (OLD.content IS DISTINCT FROM NEW.content)"
    " EXECUTE FUNCTION automemory_memory_search_follow()",
    # Every memory gets its row, and every row its document.
    f"INSERT INTO {SEARCH} (memory_id, keywords) SELECT id, '[]'::jsonb FROM identity_memories"
    " ON CONFLICT (memory_id) DO NOTHING",
    f"UPDATE {SEARCH} SET keywords = keywords",
)
POSTGRESQL_DROP = (
    "DROP TRIGGER IF EXISTS automemory_memory_search_content ON identity_memories",
    "DROP TRIGGER IF EXISTS automemory_memory_search_follow ON identity_memories",
    "DROP FUNCTION IF EXISTS automemory_memory_search_follow()",
    f"DROP TRIGGER IF EXISTS automemory_memory_search_document ON {SEARCH}",
    "DROP FUNCTION IF EXISTS automemory_memory_search_document()",
    "DROP INDEX IF EXISTS automemory_memory_search_gin",
    f"ALTER TABLE {SEARCH} DROP COLUMN IF EXISTS document",
)


def index_create(apps, schema_editor):
    create = {"sqlite": SQLITE_CREATE, "postgresql": POSTGRESQL_CREATE}
    for statement in create.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(statement)


def index_drop(apps, schema_editor):
    drop = {"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_DROP}
    for statement in drop.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0030_memory_search_copied"),
        # After the host's table lost the column (on SQLite, a rebuild that drops triggers).
        ("controlplane", "0024_memory_keywords_out"),
    ]

    operations = [
        migrations.RunPython(index_create, index_drop, elidable=False),
    ]
