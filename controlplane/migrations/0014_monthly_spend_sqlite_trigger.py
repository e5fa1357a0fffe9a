"""SQLite: the database adds each usage ledger row to its user's monthly total (a trigger).

SQLite cannot write two tables in one statement; with the trigger, recording a run is one
insert, as on PostgreSQL where the worker's finish writes both in one statement. The code
of this release stops upserting the month itself on SQLite: stop the workers and API
processes of the previous release before migrating a SQLite database (`make run` does),
else the runs they record meanwhile count twice in their month (`manage.py spend_check
--fix` repairs it). PostgreSQL is unchanged.
"""

from django.db import migrations

from controlplane.services.usage import SQLITE_MONTH_TRIGGER as TRIGGER
from controlplane.services.usage import sqlite_month_trigger_sql


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(sqlite_month_trigger_sql())


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0013_task_claimed_at"),
    ]

    operations = [migrations.RunPython(create, drop)]
