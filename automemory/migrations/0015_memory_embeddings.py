"""Each memory's embedding state, in a table of auto memory's own keyed by memory.

The triggers that keep it in step with `identity_memories` and the vector column (pgvector
on PostgreSQL, a BLOB for sqlite-vec on SQLite) are created by
`automemory.services.vectors.vector_store_ensure`, here and after every later `migrate`
(post_migrate: it re-creates what a SQLite table rebuild dropped, and adds the vector column
once the extension is installed). Going back drops the triggers with the table.
"""

import django.db.models.deletion
from django.db import migrations, models

TRIGGERS_DROP = {
    "sqlite": [
        "DROP TRIGGER IF EXISTS memory_embedding_insert",
        "DROP TRIGGER IF EXISTS memory_embedding_content",
        "DROP TRIGGER IF EXISTS memory_embedding_owner",
        "DROP TRIGGER IF EXISTS memory_embedding_delete",
    ],
    "postgresql": [
        "DROP TRIGGER IF EXISTS memory_embedding_sync ON identity_memories",
        "DROP FUNCTION IF EXISTS automemory_memory_embedding_sync()",
    ],
}


def store_create(apps, schema_editor):
    from automemory.services.vectors import vector_store_ensure

    vector_store_ensure(using=schema_editor.connection.alias)


def triggers_drop(apps, schema_editor):
    for statement in TRIGGERS_DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0014_flags_turned_on_by_others"),
        ("controlplane", "0017_task_memory_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryEmbedding",
            fields=[
                (
                    "memory",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="controlplane.identitymemory",
                    ),
                ),
                ("scope", models.CharField(max_length=16)),
                ("status", models.CharField(max_length=16)),
                ("project_id", models.BigIntegerField(null=True)),
                ("user_id", models.BigIntegerField(null=True)),
                ("pending", models.BooleanField(default=True)),
                ("model", models.CharField(blank=True, default="", max_length=64)),
                ("embedded_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "automemory_memory_embeddings",
                "indexes": [
                    models.Index(
                        condition=models.Q(("pending", True)),
                        fields=["memory"],
                        name="memory_embedding_pending",
                    ),
                    models.Index(fields=["project_id"], name="memory_embedding_project"),
                    models.Index(fields=["user_id"], name="memory_embedding_user"),
                ],
            },
        ),
        migrations.RunPython(store_create, triggers_drop),
    ]
