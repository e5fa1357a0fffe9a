"""The meaning of each memory as a vector, kept apart from the host's memory table.

One row per memory (`identity_memories`), written by database triggers when the memory is
written or its content edited (`pending`), and filled by the sweeper's embedding pass
(`automemory.services.vectors`). The vector itself is a column the store adds by database:
`vector(384)` with an HNSW index on PostgreSQL (pgvector), a float32 BLOB and its
one-bit-per-dimension sign on SQLite (sqlite-vec). Scope, status, project and user are copies of the
memory's (by the same triggers), so a nearest-neighbour search is narrowed to one owner's
live memories by an index.
"""

from django.db import models
from django.db.models import Q

from controlplane.models import IdentityMemory


class MemoryEmbedding(models.Model):
    """A memory's embedding state: pending until the embedding pass wrote its vector."""

    memory = models.OneToOneField(
        IdentityMemory, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    scope = models.CharField(max_length=16)
    status = models.CharField(max_length=16)
    project_id = models.BigIntegerField(null=True)
    user_id = models.BigIntegerField(null=True)
    # Set when the memory is written or its content changes; cleared when its vector is.
    pending = models.BooleanField(default=True)
    # The model that wrote the vector (vectors of another model are never compared).
    model = models.CharField(max_length=64, blank=True, default="")
    embedded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "automemory_memory_embeddings"
        indexes = [
            models.Index(
                fields=["memory"], name="memory_embedding_pending", condition=Q(pending=True)
            ),
            models.Index(fields=["project_id"], name="memory_embedding_project"),
            models.Index(fields=["user_id"], name="memory_embedding_user"),
        ]

    def __str__(self) -> str:
        return f"embedding of memory {self.memory_id}"
