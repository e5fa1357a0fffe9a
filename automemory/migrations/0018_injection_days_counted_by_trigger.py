"""SQLite: the database counts an injection's day when it counts the memory's injection (a
trigger), so that the injection's counters and day counts are one statement, as on PostgreSQL
where one statement writes both.

The trigger fires on an update that adds one to `injection_count` and sets
`last_injected_at`, and counts the day of that time: its UTC date, the server's local date
(TIME_ZONE is UTC). PostgreSQL is unchanged.
"""

from django.db import migrations

TRIGGER = "memory_injection_counts_its_day"

CREATE = f"""
CREATE TRIGGER IF NOT EXISTS {TRIGGER} AFTER UPDATE OF injection_count ON identity_memories
WHEN NEW.injection_count = OLD.injection_count + 1 AND NEW.last_injected_at IS NOT NULL
BEGIN
    INSERT INTO automemory_memory_injection_days (memory_id, day, tasks)
    VALUES (NEW.id, date(NEW.last_injected_at), 1)
    ON CONFLICT (memory_id, day) DO UPDATE SET
        tasks = automemory_memory_injection_days.tasks + 1;
END
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0017_memory_injection_days"),
    ]

    operations = [migrations.RunPython(create, drop)]
