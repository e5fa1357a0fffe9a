from django.db import migrations

BATCH = 1000


def goals_from_memories(apps, schema_editor):
    """Every auto memory's goal and source finish (and any other memory that has either),
    copied into auto memory's own row with the copies its constraints read (before the host
    drops its columns: `run_before`). The host's constraints held, so these hold too."""
    alias = schema_editor.connection.alias
    IdentityMemory = apps.get_model("controlplane", "IdentityMemory")
    MemoryGoal = apps.get_model("automemory", "MemoryGoal")
    memories = (
        IdentityMemory.objects.using(alias)
        .exclude(source="manual", goal_key="", source_finished_at__isnull=True)
        .order_by("pk")
        .values_list(
            "pk",
            "goal_key",
            "source_finished_at",
            "project_id",
            "created_by_id",
            "visibility",
            "source",
            "status",
        )
    )
    rows = (
        MemoryGoal(
            memory_id=pk,
            goal_key=goal_key,
            source_finished_at=finished,
            project_id=project_id,
            author_id=author_id,
            visibility=visibility,
            active=source == "auto" and status == "active",
        )
        for pk, goal_key, finished, project_id, author_id, visibility, source, status in (
            memories.iterator(chunk_size=BATCH)
        )
    )
    MemoryGoal.objects.using(alias).bulk_create(rows, batch_size=BATCH)


def goals_to_memories(apps, schema_editor):
    """Back onto the host's columns (they exist again: the host's migration was reversed)."""
    alias = schema_editor.connection.alias
    IdentityMemory = apps.get_model("controlplane", "IdentityMemory")
    MemoryGoal = apps.get_model("automemory", "MemoryGoal")
    goals = MemoryGoal.objects.using(alias).order_by("pk")
    for memory_id, goal_key, finished in goals.values_list(
        "memory_id", "goal_key", "source_finished_at"
    ).iterator(chunk_size=BATCH):
        IdentityMemory.objects.using(alias).filter(pk=memory_id).update(
            goal_key=goal_key, source_finished_at=finished
        )


class Migration(migrations.Migration):
    # The copy runs while the host's memory still has the columns it drops.
    run_before = [("controlplane", "0023_memory_goal_out")]

    dependencies = [
        ("automemory", "0025_memory_goals"),
    ]

    operations = [
        migrations.RunPython(goals_from_memories, goals_to_memories, elidable=False),
    ]
