"""Identity memories (user- and project-level)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models.constraints import choices_check
from controlplane.models.projects import Project
from controlplane.models.tasks import Task


class MemoryScope(models.TextChoices):
    USER = "user", "User"
    PROJECT = "project", "Project"


class MemorySource(models.TextChoices):
    MANUAL = "manual", "Manual"
    AUTO = "auto", "Auto"


class MemoryVisibility(models.TextChoices):
    # Every member of the project sees it (the default for every memory).
    PROJECT = "project", "The project"
    # Only its author (`created_by`) sees it, gets it injected or finds it, until they share
    # it: an auto memory drawn from a task that received its user's private memories.
    AUTHOR = "author", "Its author only"


class MemoryStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUPERSEDED = "superseded", "Superseded"
    # Retired by the retention rule (unused for too long); visible and restorable.
    ARCHIVED = "archived", "Archived"


class IdentityMemory(models.Model):
    """A remembered fact about a user (scope user) or a project (scope project).

    User-level memories are written only by hand. Auto memories are project-level and come
    from one task each (`source_task`, exposed as `source_thread_id`).

    A memory's usage counters, report hold, instruction flags and their approval are auto
    memory's, in its own table (`automemory.MemoryState`), and so is an auto memory's goal
    with the rule that one goal keeps one active memory (`automemory.MemoryGoal`), and so
    are the search words a model gave with it and the full-text index (`automemory.
    MemorySearch`); the host's API shows what it shows of them through the values apps
    register (`selectors.memory_row_extra_register`). The visibility and archive time are
    the host's (see docs/architecture.md, "The boundary").
    """

    scope = models.CharField(max_length=16, choices=MemoryScope.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="identity_memories",
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="memories"
    )
    content = models.TextField()
    source = models.CharField(
        max_length=16, choices=MemorySource.choices, default=MemorySource.MANUAL
    )
    source_task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="auto_memories",
        db_column="source_thread_id",
    )
    status = models.CharField(
        max_length=16, choices=MemoryStatus.choices, default=MemoryStatus.ACTIVE
    )
    visibility = models.CharField(
        max_length=16, choices=MemoryVisibility.choices, default=MemoryVisibility.PROJECT
    )
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="created_memories",
    )
    # When the retention rule archived the memory (status `archived`); cleared on restore.
    archived_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "identity_memories"
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "identity memories"
        indexes = [
            # Injection: newest active memories of a user / of a project.
            models.Index(
                fields=["user", "-created_at", "-id"],
                name="memory_user_active_idx",
                condition=Q(scope="user", status="active"),
            ),
            models.Index(
                fields=["project", "-created_at", "-id"],
                name="memory_project_active_idx",
                condition=Q(scope="project", status="active"),
            ),
            # The console's list of a project's memories: every status, newest first.
            models.Index(
                fields=["project", "-created_at", "-id"], name="memory_project_created_idx"
            ),
            # Retention: a user's active auto memories (`created_by` is the source task's
            # user) by when they were last written; a memory last used before the cutoff was
            # last written before it too, so a pass reads only the candidates.
            models.Index(
                fields=["created_by", "updated_at"],
                name="memory_auto_updated_idx",
                condition=Q(source="auto", status="active"),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(scope="user", user__isnull=False, project__isnull=True)
                    | Q(scope="project", project__isnull=False)
                ),
                name="memory_scope_owner",
            ),
            # Auto extraction never writes user-level memories.
            models.CheckConstraint(
                condition=~Q(source="auto") | Q(scope="project", source_task__isnull=False),
                name="memory_auto_is_project_level",
            ),
            choices_check("status", MemoryStatus, "memory_status_valid"),
            models.CheckConstraint(
                condition=Q(status="archived", archived_at__isnull=False)
                | (~Q(status="archived") & Q(archived_at__isnull=True)),
                name="memory_archived_has_time",
            ),
            # One auto memory per source task.
            models.UniqueConstraint(
                fields=["source_task"],
                condition=Q(source="auto"),
                name="memory_one_auto_per_task",
            ),
            choices_check("visibility", MemoryVisibility, "memory_visibility_valid"),
            # Only a project memory can be held for its author.
            models.CheckConstraint(
                condition=Q(visibility="project") | Q(scope="project"),
                name="memory_author_only_is_project_level",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} memory {self.pk}"
