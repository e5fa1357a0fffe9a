from django.apps import AppConfig


class AutoMemoryConfig(AppConfig):
    name = "automemory"
    verbose_name = "Auto memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from automemory import checks  # noqa: F401  (registers the system checks)
        from automemory.models import task_injected_ids
        from automemory.services.feedback import reports_close
        from automemory.services.memory_goals import (
            goal_triggers_drop,
            goal_triggers_ensure,
            memory_restore_problem,
        )
        from automemory.services.memory_state import (
            memory_awaiting_review,
            memory_flag_approve,
            memory_flag_approved,
            memory_flag_audit,
            memory_held_by_report,
            memory_report_hold_audit,
            memory_report_hold_release,
            memory_row_extras,
            memory_text_review,
        )
        from automemory.services.text import manual_memory_secret_problem
        from automemory.services.transcripts import private_notes_removed
        from controlplane.access import related_register
        from controlplane.models import IdentityMemory, Task
        from controlplane.selectors import memory_row_extra_register
        from controlplane.services.memories import (
            memory_approved_hook_register,
            memory_content_check_register,
            memory_hold_register,
            memory_restore_check_register,
            memory_text_review_register,
        )
        from controlplane.services.tasks import (
            task_injected_ids_reader_register,
            task_text_filter_register,
        )

        # A hand-written memory is injected into every later task: no secrets in it.
        memory_content_check_register(manual_memory_secret_problem)
        # An owner's approval closes the reports that held the memory.
        memory_approved_hook_register(reports_close)
        # Memories cite code: the host's memory API takes and shows their citations.
        from automemory.services.citations.hosted import CITATION_STORE
        from controlplane.services.memory_citations import citation_store_register

        citation_store_register(CITATION_STORE)
        # What an agent quoted of its user's private memories is theirs alone to read.
        task_text_filter_register(private_notes_removed)
        # The task API lists the memories injected into a task (kept in auto memory's row).
        task_injected_ids_reader_register(task_injected_ids)
        related_register(Task, "auto_memory_state")
        related_register(IdentityMemory, "auto_memory_state")
        # Hand-written text is flagged when it reads like instructions to the agent, and
        # held for a project owner unless its author may approve it (auto memory's row).
        memory_text_review_register(memory_text_review)
        # Approving a memory approves its flagged text and releases a report's hold on it.
        memory_hold_register(
            held=memory_awaiting_review,
            release=memory_flag_approve,
            approved=memory_flag_approved,
            audit=memory_flag_audit,
        )
        memory_hold_register(
            held=memory_held_by_report,
            release=memory_report_hold_release,
            audit=memory_report_hold_audit,
        )
        # One goal keeps one active auto memory: restoring another of it is refused.
        memory_restore_check_register(memory_restore_problem)
        # The memory API shows the usage counters, the hold, the instruction flags and
        # their approval (auto memory's own row).
        for name, extra in memory_row_extras().items():
            memory_row_extra_register(name, **extra)

        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate, pre_migrate

        from automemory.services.search import search_index_ensure, search_triggers_drop
        from automemory.services.vectors import connection_prepare, vector_store_ensure

        # SQLite triggers that name another table than their own would fail a migration
        # that rebuilds that table: they are dropped while `migrate` runs, and put back
        # after it (as after a rebuild of their own table, which drops them too).
        pre_migrate.connect(search_triggers_drop, sender=self)
        pre_migrate.connect(goal_triggers_drop, sender=self)
        post_migrate.connect(search_index_ensure, sender=self)
        # The vector store's triggers and columns (and the extension, once installed).
        post_migrate.connect(vector_store_ensure, sender=self)
        post_migrate.connect(goal_triggers_ensure, sender=self)
        # sqlite-vec into every SQLite connection; HNSW's iterative scans on PostgreSQL.
        connection_created.connect(connection_prepare)
