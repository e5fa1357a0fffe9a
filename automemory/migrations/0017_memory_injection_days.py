"""How many tasks received each memory, per day (the memory-health page's counts), filled
from the tasks of the last 8 weeks (the page's window) and counted up by injection since."""

from collections import Counter
from datetime import timedelta

import django.db.models.deletion
from django.db import migrations, models


def backfill(apps, schema_editor):
    from django.utils import timezone

    task_model = apps.get_model("controlplane", "Task")
    memory_model = apps.get_model("controlplane", "IdentityMemory")
    day_model = apps.get_model("automemory", "MemoryInjectionDay")
    since = timezone.now() - timedelta(weeks=8, days=1)
    counts: Counter = Counter()
    tasks = task_model.objects.using(schema_editor.connection.alias).filter(created_at__gte=since).exclude(injected_memory_ids=[])
    for started, created, ids in tasks.values_list(
        "started_at", "created_at", "injected_memory_ids"
    ).iterator():
        if isinstance(ids, list):
            day = timezone.localdate(started or created)
            counts.update((pk, day) for pk in {pk for pk in ids if type(pk) is int})
    existing = set(
        memory_model.objects.using(schema_editor.connection.alias).filter(pk__in={pk for pk, _ in counts}).values_list("pk", flat=True)
    )
    day_model.objects.using(schema_editor.connection.alias).bulk_create(
        (
            day_model(memory_id=pk, day=day, tasks=total)
            for (pk, day), total in counts.items()
            if pk in existing
        ),
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0016_task_text_cleaned"),
        ("controlplane", "0017_task_memory_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryInjectionDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("tasks", models.PositiveIntegerField(default=0)),
                (
                    "memory",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="controlplane.identitymemory",
                    ),
                ),
            ],
            options={
                "db_table": "automemory_memory_injection_days",
                "indexes": [
                    models.Index(fields=["day", "memory"], name="memory_injection_day_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("memory", "day"), name="memory_injection_day_once"
                    )
                ],
            },
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
