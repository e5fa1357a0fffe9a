"""The audit log."""

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """An append-only record of something that happened (never updated or deleted by the app)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    # Who acted when it was not a user, e.g. "worker:host-1234".
    actor_label = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=50, blank=True, default="")
    target_id = models.CharField(max_length=64, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "audit_log"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="audit_target_idx"),
            models.Index(fields=["action", "created_at"], name="audit_action_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} on {self.target_type} {self.target_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise PermissionError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("Audit events are append-only.")
