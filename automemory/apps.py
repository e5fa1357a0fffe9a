from django.apps import AppConfig


class AutoMemoryConfig(AppConfig):
    name = "automemory"
    verbose_name = "Auto memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from automemory import checks  # noqa: F401  (registers the system checks)
        from automemory.models import task_injected_ids
        from automemory.services.feedback import reports_close
        from automemory.services.text import manual_memory_secret_problem
        from automemory.services.transcripts import private_notes_removed
        from controlplane.access import task_related_register
        from controlplane.services.memories import (
            memory_approved_hook_register,
            memory_content_check_register,
        )
        from controlplane.services.tasks import (
            task_injected_ids_reader_register,
            task_text_filter_register,
        )

        # A hand-written memory is injected into every later task: no secrets in it.
        memory_content_check_register(manual_memory_secret_problem)
        # An owner's approval closes the reports that held the memory.
        memory_approved_hook_register(reports_close)
        # What an agent quoted of its user's private memories is theirs alone to read.
        task_text_filter_register(private_notes_removed)
        # The task API lists the memories injected into a task (kept in auto memory's row).
        task_injected_ids_reader_register(task_injected_ids)
        task_related_register("auto_memory_state")

        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from automemory.services.search import sqlite_search_ensure
        from automemory.services.vectors import connection_prepare, vector_store_ensure

        # A SQLite table rebuild (some column changes) drops the memory search triggers.
        post_migrate.connect(sqlite_search_ensure, sender=self)
        # The vector store's triggers and columns (and the extension, once installed).
        post_migrate.connect(vector_store_ensure, sender=self)
        # sqlite-vec into every SQLite connection; HNSW's iterative scans on PostgreSQL.
        connection_created.connect(connection_prepare)
