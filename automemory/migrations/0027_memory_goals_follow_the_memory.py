"""Triggers on the host's memory table keep the copies `MemoryGoal` reads (project, author,
visibility, whether the memory is an active auto memory) right, whoever changes the memory:
in the statement that changes it, so a change that would give a goal two active memories
fails there (the constraints are on `automemory_memory_goals`). The writer stores the row
itself, with the memory, in its transaction.

Triggers rather than a hook the host calls: the memory changes through paths that call no
service (a queryset's `update()` in retention, supersede, retraction and sharing; the
admin's form; a user's deletion setting `created_by` to NULL), and a hook skipped once
would let the copy drift from the row it copies. SQLite drops a table's triggers when a
migration rebuilds it; `automemory.services.memory_goals.goal_triggers_ensure` brings them
back after every `migrate`.
"""

from django.db import migrations

COPY = (
    "UPDATE automemory_memory_goals SET"
    " project_id = NEW.project_id,"
    " author_id = NEW.created_by_id,"
    " visibility = NEW.visibility,"
    " active = (NEW.source = 'auto' AND NEW.status = 'active')"
    " WHERE memory_id = NEW.id"
)
COLUMNS = ("status", "source", "visibility", "project_id", "created_by_id")
TRIGGER = "memory_goal_follows_the_memory"
SQLITE_CREATE = (
    f"CREATE TRIGGER IF NOT EXISTS {TRIGGER}"
    f" AFTER UPDATE OF {', '.join(COLUMNS)} ON identity_memories"
    f" WHEN {' OR '.join(f'OLD.{c} IS NOT NEW.{c}' for c in COLUMNS)}"
    f" BEGIN {COPY}; END"
)
POSTGRESQL_CREATE = (
    f"CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger AS $$"
    f" BEGIN {COPY}; RETURN NULL; END $$ LANGUAGE plpgsql",
    f"DROP TRIGGER IF EXISTS {TRIGGER} ON identity_memories",
    f"CREATE TRIGGER {TRIGGER}"
    f" AFTER UPDATE OF {', '.join(COLUMNS)} ON identity_memories FOR EACH ROW"
    f" WHEN ({' OR '.join(f'OLD.{c} IS DISTINCT FROM NEW.{c}' for c in COLUMNS)})"
    f" EXECUTE FUNCTION {TRIGGER}()",
)
DROP = {
    "sqlite": (f"DROP TRIGGER IF EXISTS {TRIGGER}",),
    "postgresql": (
        f"DROP TRIGGER IF EXISTS {TRIGGER} ON identity_memories",
        f"DROP FUNCTION IF EXISTS {TRIGGER}()",
    ),
}


def trigger_create(apps, schema_editor):
    create = {"sqlite": (SQLITE_CREATE,), "postgresql": POSTGRESQL_CREATE}
    for statement in create.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(statement)


def trigger_drop(apps, schema_editor):
    for statement in DROP.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0026_memory_goals_copied"),
        # After the host's table lost the columns (on SQLite, a rebuild that drops triggers).
        ("controlplane", "0023_memory_goal_out"),
    ]

    operations = [
        migrations.RunPython(trigger_create, trigger_drop),
    ]
