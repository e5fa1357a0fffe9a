"""Memories that cite code: the lines a memory speaks of, and the branch a memory is scoped
to until that branch is merged (`automemory.services.citations`)."""

from django.db import models
from django.db.models import F, Q

from controlplane.models import IdentityMemory

# At most this many citations per memory (an API request with more is a 400).
MAX_CITATIONS_PER_MEMORY = 20
# At most this many lines per citation.
MAX_CITED_LINES = 400
MAX_PATH_CHARS = 1024


class CitationState(models.TextChoices):
    # The cited lines' content is what it was when written (at the commit checked last).
    FRESH = "fresh"
    # The same lines were found elsewhere in the file; the line numbers follow them.
    MOVED = "moved"
    # The file is there, the lines are not: the memory waits for revalidation.
    CHANGED = "changed"
    # The file is gone.
    DELETED = "deleted"
    # Not checked yet, or the repository could not be read when it was.
    UNCHECKED = "unchecked"
    # The lines are not at the commit checked against, and the citation's commit is not in
    # its history: the code cited is not merged there (yet). Never stored.
    UNMERGED = "unmerged"


STALE_STATES = (CitationState.CHANGED, CitationState.DELETED)


class MemoryCitation(models.Model):
    """Lines `start_line`..`end_line` (1-based, inclusive) of `path` at `commit` that a memory
    speaks of. `content_hash` is the sha256 of those lines' bytes as written, so a check
    needs only the file at the commit it checks against. `state` is what the last check
    found (against `checked_commit`)."""

    memory = models.ForeignKey(IdentityMemory, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=MAX_PATH_CHARS)
    start_line = models.PositiveIntegerField()
    end_line = models.PositiveIntegerField()
    commit = models.CharField(max_length=64)
    branch = models.CharField(max_length=255)
    content_hash = models.CharField(max_length=64)
    state = models.CharField(
        max_length=16, choices=CitationState.choices, default=CitationState.FRESH
    )
    checked_commit = models.CharField(max_length=64, blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "automemory_memory_citations"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(start_line__gte=1) & Q(end_line__gte=F("start_line")),
                name="memory_citation_lines_ordered",
            ),
            models.CheckConstraint(condition=~Q(path=""), name="memory_citation_path_set"),
        ]
        indexes = [
            models.Index(fields=["memory", "id"], name="memory_citation_memory_idx"),
            models.Index(fields=["state", "memory"], name="memory_citation_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}@{self.commit[:12]} ({self.state})"


class MemoryBranchScope(models.Model):
    """A memory drawn from a task on a branch other than the repository's default: given
    only to tasks on `branch` until `commit` (the task's head) is reachable from the default
    branch's head; `merged_at` is set the first time a check finds it is."""

    memory = models.OneToOneField(
        IdentityMemory, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    branch = models.CharField(max_length=255)
    commit = models.CharField(max_length=64)
    merged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "automemory_memory_branch_scopes"

    def __str__(self) -> str:
        return f"memory {self.memory_id} on {self.branch}"
