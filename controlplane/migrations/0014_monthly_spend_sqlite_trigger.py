"""SQLite: the database adds each usage ledger row to its user's monthly total (a trigger).

SQLite cannot write two tables in one statement; with the trigger, recording a run is one
insert, as on PostgreSQL where the worker's finish writes both in one statement. The code
of this release stops upserting the month itself on SQLite: stop the workers and API
processes of the previous release before migrating a SQLite database (`make run` does),
else the runs they record meanwhile count twice in their month (`manage.py spend_check
--fix` repairs it). PostgreSQL is unchanged.
"""

from django.db import migrations

TRIGGER = "usage_ledger_adds_to_month"

CREATE = f"""
CREATE TRIGGER IF NOT EXISTS {TRIGGER} AFTER INSERT ON usage_ledger
BEGIN
    INSERT INTO usage_monthly_spend (user_id, month, total_usd, entries, updated_at)
    VALUES (
        NEW.user_id, strftime('%Y-%m-01', NEW.finished_at), NEW.cost_usd, 1,
        strftime('%Y-%m-%d %H:%M:%f', 'now')
    )
    ON CONFLICT (user_id, month) DO UPDATE SET
        total_usd = usage_monthly_spend.total_usd + excluded.total_usd,
        entries = usage_monthly_spend.entries + 1,
        updated_at = excluded.updated_at;
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
        ("controlplane", "0013_task_claimed_at"),
    ]

    operations = [migrations.RunPython(create, drop)]
