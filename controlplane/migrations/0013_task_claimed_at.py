from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0012_memory_project_list_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
