"""Reads the auto memory tests share."""

from automemory.models import AutoMemoryLog
from controlplane.models import IdentityMemory, MemorySource


def log_of(task) -> AutoMemoryLog:
    """The task's extraction log row."""
    return AutoMemoryLog.objects.get(task=task)


def auto_memories(**filters):
    """The auto memories, narrowed by `filters`."""
    return IdentityMemory.objects.filter(source=MemorySource.AUTO, **filters)


def migration_executor():
    """A migration executor over the test database, its graph read afresh."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor


def migrate_to_latest() -> None:
    """Apply every migration (what the other tests expect after one moved the database)."""
    executor = migration_executor()
    executor.migrate(executor.loader.graph.leaf_nodes())


def historical_apps(targets):
    """The models as the migrations up to `targets` left them."""
    return migration_executor().loader.project_state(targets).apps
