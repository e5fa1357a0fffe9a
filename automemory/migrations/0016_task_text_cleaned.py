"""Tasks' texts as other members read them, cleaned once per task, turn and text."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0015_memory_embeddings"),
        ("controlplane", "0017_task_memory_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskTextCleaned",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("turn", models.PositiveIntegerField()),
                ("source", models.CharField(max_length=64)),
                ("text", models.TextField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "task",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="controlplane.task",
                    ),
                ),
            ],
            options={
                "db_table": "automemory_task_text_cleaned",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("task", "turn", "source"), name="task_text_cleaned_once"
                    )
                ],
            },
        ),
    ]
