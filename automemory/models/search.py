"""What auto memory finds a memory by, kept out of the host's memory table.

One row per memory, hand-written ones too: the search words a model gave with an auto
memory (`keywords`, empty for the others). The full-text index over a memory's content and
keywords is auto memory's as well: an FTS5 table `automemory_memory_fts` on SQLite, and a
`document` tsvector column of this table with a GIN index on PostgreSQL. Database triggers
keep both in step in the statement that changes either table (`automemory/0031`): the
host's insert of a memory creates its row, a change of its content re-indexes it, and its
delete removes the row, so the host writes memories without knowing of this table.
"""

from django.db import models

from controlplane.models import IdentityMemory


class MemorySearch(models.Model):
    """A memory's search words (its content is the host's); the row the index reads."""

    memory = models.OneToOneField(
        IdentityMemory,
        primary_key=True,
        # The host's delete of a memory deletes this row by trigger, in the same statement.
        on_delete=models.DO_NOTHING,
        related_name="auto_memory_search",
    )
    keywords = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "automemory_memory_search"
        verbose_name = "memory search words"
        verbose_name_plural = "memory search words"

    def __str__(self) -> str:
        return f"search words of memory {self.memory_id}"
