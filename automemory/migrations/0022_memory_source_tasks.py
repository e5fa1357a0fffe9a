import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    """The memories' provenance links become auto memory's: the model takes over the host's
    table as it is (no row copied, none lost), then the table takes auto memory's name."""

    dependencies = [
        ("automemory", "0021_memory_state"),
        ("controlplane", "0021_memory_source_tasks_out"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MemorySourceTask",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("merged", models.BooleanField(default=False)),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        (
                            "memory",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="source_links",
                                to="controlplane.identitymemory",
                            ),
                        ),
                        (
                            "task",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memory_links",
                                to="controlplane.task",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "identity_memory_source_tasks",
                        "ordering": ["created_at", "id"],
                        "indexes": [
                            models.Index(
                                fields=["memory", "created_at"], name="memory_source_memory_idx"
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("task",), name="memory_source_one_memory_per_task"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(
            name="memorysourcetask", table="automemory_memory_source_tasks"
        ),
    ]
