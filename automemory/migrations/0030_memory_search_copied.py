"""The host's keywords copied into auto memory's `automemory_memory_search`, one row per
memory, before the host drops its column (`run_before`); the full-text index built over the
host's table by 0007 is dropped with it (0031 builds it over auto memory's table)."""

import importlib

from django.db import migrations

COPY = (
    "INSERT INTO automemory_memory_search (memory_id, keywords)"
    " SELECT id, keywords FROM identity_memories"
)
COPY_BACK = (
    "UPDATE identity_memories SET keywords = ("
    " SELECT s.keywords FROM automemory_memory_search s WHERE s.memory_id = identity_memories.id)"
    " WHERE id IN (SELECT memory_id FROM automemory_memory_search)"
)
HOST_INDEX = importlib.import_module("automemory.migrations.0007_memory_full_text_search")


def keywords_copy(apps, schema_editor):
    HOST_INDEX.search_drop(apps, schema_editor)
    schema_editor.execute(COPY)


def keywords_copy_back(apps, schema_editor):
    schema_editor.execute(COPY_BACK)
    HOST_INDEX.search_create(apps, schema_editor)


class Migration(migrations.Migration):
    # The copy runs while the host's memory still has the column it drops.
    run_before = [("controlplane", "0024_memory_keywords_out")]

    dependencies = [
        ("automemory", "0029_memory_search"),
    ]

    operations = [
        migrations.RunPython(keywords_copy, keywords_copy_back, elidable=False),
    ]
