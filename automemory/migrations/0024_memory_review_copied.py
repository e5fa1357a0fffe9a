from django.db import migrations

BATCH = 1000
# What moves: the instruction flags of a memory's text and their approval.
FIELDS = ("instruction_flags", "flagged", "approved_at", "approved_by_id")


def review_from_memories(apps, schema_editor):
    """Every memory's flags and approval, copied into auto memory's own row (before the host
    drops its columns: `run_before`): an existing row (usage, a report hold) gets them, a
    memory with none of them set gets no row."""
    alias = schema_editor.connection.alias
    IdentityMemory = apps.get_model("controlplane", "IdentityMemory")
    MemoryState = apps.get_model("automemory", "MemoryState")
    flagged = (
        IdentityMemory.objects.using(alias)
        .exclude(instruction_flags=[], flagged=False, approved_at__isnull=True)
        .order_by("pk")
        .values_list("pk", *FIELDS)
    )
    batch: list = []

    def store() -> None:
        rows = [MemoryState(memory_id=v[0], **dict(zip(FIELDS, v[1:], strict=True))) for v in batch]
        MemoryState.objects.using(alias).bulk_create(
            rows,
            batch_size=BATCH,
            update_conflicts=True,
            unique_fields=["memory"],
            update_fields=list(FIELDS),
        )
        batch.clear()

    for values in flagged.iterator(chunk_size=BATCH):
        batch.append(values)
        if len(batch) == BATCH:
            store()
    if batch:
        store()


def review_to_memories(apps, schema_editor):
    """Back onto the host's columns (they exist again: the host's migration was reversed)."""
    alias = schema_editor.connection.alias
    IdentityMemory = apps.get_model("controlplane", "IdentityMemory")
    MemoryState = apps.get_model("automemory", "MemoryState")
    states = (
        MemoryState.objects.using(alias)
        .exclude(instruction_flags=[], flagged=False, approved_at__isnull=True)
        .order_by("pk")
        .values_list("memory_id", *FIELDS)
    )
    for values in states.iterator(chunk_size=BATCH):
        IdentityMemory.objects.using(alias).filter(pk=values[0]).update(
            **dict(zip(FIELDS, values[1:], strict=True))
        )


class Migration(migrations.Migration):
    # The copy runs while the host's memory still has the columns it drops.
    run_before = [("controlplane", "0022_memory_review_out")]

    dependencies = [
        ("automemory", "0023_memory_review_state"),
    ]

    operations = [
        migrations.RunPython(review_from_memories, review_to_memories, elidable=False),
    ]
