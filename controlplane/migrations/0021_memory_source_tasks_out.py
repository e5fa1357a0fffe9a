from django.db import migrations


class Migration(migrations.Migration):
    """The memories' provenance links leave the host's models: automemory's
    `MemorySourceTask` takes over the same table (its migration 0020 renames it), so no row
    is copied and none is lost."""

    dependencies = [
        ("controlplane", "0020_memory_usage_out"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="identitymemory", name="source_tasks"),
                migrations.DeleteModel(name="MemorySourceTask"),
            ],
            database_operations=[],
        ),
    ]
