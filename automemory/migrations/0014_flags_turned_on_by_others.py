"""A task's switch turned on by someone other than its user, before only the task's user
could: set back to follow the user's own setting (never turns anything on)."""

from django.db import migrations
from django.db.models import F, Q


def forward(apps, schema_editor):
    flags = apps.get_model("automemory", "TaskAutoMemoryFlags")
    by_others = flags.objects.using(schema_editor.connection.alias).filter(~Q(updated_by=F("task__user")) | Q(updated_by__isnull=True))
    for name in ("use_memories", "generate_memories"):
        by_others.filter(**{name: True}).update(**{name: None})


class Migration(migrations.Migration):
    dependencies = [
        ("automemory", "0013_person_reports"),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
