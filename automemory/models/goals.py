"""Auto memory's goal of an auto memory, kept out of the host's memory table.

An auto memory comes from one task and carries its goal (`goal_key`, the hash of the task's
normalised goal line) so that one goal keeps one active memory, and when that task finished
(`source_finished_at`: the later finish wins when two tasks share a goal). The rule is a
database constraint in this one table, so the row keeps copies of what it needs from the
host's row: the project, the author, the visibility and whether the memory is an active
auto memory. The writer stores the row with the host's row, in its transaction; triggers
on the host's table keep the copies right whoever changes the memory afterwards (archive,
restore, share, supersede, the admin), in the statement that changes it, so a change that
would break the rule fails there (`automemory/0026`, on SQLite and PostgreSQL).
"""

from django.db import models
from django.db.models import Q

from controlplane.models import IdentityMemory, MemorySource, MemoryStatus, MemoryVisibility


class MemoryGoal(models.Model):
    """The goal of an auto memory and the copies its one-active-per-goal rule reads."""

    memory = models.OneToOneField(
        IdentityMemory, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_goal"
    )
    goal_key = models.CharField(max_length=64, blank=True, default="")
    # When the source task finished: the later finish wins when two tasks share a goal.
    source_finished_at = models.DateTimeField(null=True, blank=True)
    # Copies of the host's row (kept by the triggers): its project, author (`created_by`),
    # visibility, and whether it is an active auto memory.
    project_id = models.BigIntegerField()
    author_id = models.BigIntegerField(null=True, blank=True)
    visibility = models.CharField(
        max_length=16, choices=MemoryVisibility.choices, default=MemoryVisibility.PROJECT
    )
    active = models.BooleanField(default=True)

    class Meta:
        db_table = "automemory_memory_goals"
        verbose_name = "auto memory goal"
        constraints = [
            # At most one active auto memory per (project, goal) that the project sees, and
            # one per (project, goal, author) held for its author.
            models.UniqueConstraint(
                fields=["project_id", "goal_key"],
                condition=Q(active=True, visibility="project"),
                name="memory_goal_one_active_per_goal",
            ),
            models.UniqueConstraint(
                fields=["project_id", "goal_key", "author_id"],
                condition=Q(active=True, visibility="author"),
                name="memory_goal_one_active_held_per_goal",
            ),
        ]
        indexes = [models.Index(fields=["project_id", "goal_key"], name="memory_goal_project_idx")]

    def __str__(self) -> str:
        return f"goal of memory {self.memory_id}"

    @classmethod
    def of(cls, memory: IdentityMemory, *, goal_key: str, source_finished_at) -> "MemoryGoal":
        """The row of `memory` (saved) with its goal, the copies taken from the memory."""
        return cls(
            memory=memory,
            goal_key=goal_key,
            source_finished_at=source_finished_at,
            project_id=memory.project_id,
            author_id=memory.created_by_id,
            visibility=memory.visibility,
            active=memory.source == MemorySource.AUTO and memory.status == MemoryStatus.ACTIVE,
        )
