from django.db import migrations


class Migration(migrations.Migration):
    """A memory's search words leave the host's memory: automemory's `MemorySearch` holds
    them (its migration 0030 copies them first, 0031 indexes them with the content)."""

    dependencies = [
        ("controlplane", "0023_memory_goal_out"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="identitymemory",
            name="keywords",
        ),
    ]
