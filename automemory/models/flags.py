"""Per-task auto memory overrides, kept apart from the host's tasks table."""

from django.conf import settings
from django.db import models

from controlplane.models import Task


class TaskAutoMemoryFlags(models.Model):
    """Per-task overrides; NULL follows the user's setting. Kept apart from the tasks table."""

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_flags"
    )
    use_memories = models.BooleanField(null=True, blank=True)
    generate_memories = models.BooleanField(null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "task auto memory flags"
        verbose_name_plural = "task auto memory flags"

    def __str__(self) -> str:
        return f"auto memory flags of task {self.task_id}"
