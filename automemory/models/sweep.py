"""The sweep's cursor and lease, and the paid extractions not yet written."""

from django.db import models
from django.db.models import Q

from controlplane.models import Task


class SweepState(models.Model):
    """A sweep's cursor and its lease: `global` (every user's tasks) or `user:<id>` (one user's).

    `cursor_*` is the (updated_at, id) of the last completed task the sweep examined, so each
    sweep reads only what changed since; `last_sweep_at` tells operators when it last ran.

    The lease makes one sweeper at a time: a holder's random `lease_token` and its
    `lease_expires_at`, renewed while it works and taken over once expired (its holder died).
    `lease_generation` counts the holders that took it. The cursor moves only under the lease
    (the update is conditional on the token), so a sweeper that lost it cannot move it.
    """

    name = models.CharField(max_length=32, primary_key=True)
    cursor_updated_at = models.DateTimeField(null=True, blank=True)
    cursor_task_id = models.BigIntegerField(default=0)
    last_sweep_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_holder = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_generation = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "sweep state"
        constraints = [
            models.CheckConstraint(
                condition=Q(lease_token__isnull=True, lease_expires_at__isnull=True)
                | Q(lease_token__isnull=False, lease_expires_at__isnull=False),
                name="sweepstate_lease_whole",
            ),
        ]

    def __str__(self) -> str:
        return f"sweep state {self.name}"


class ExtractionDraft(models.Model):
    """A paid extraction not yet written: what the extraction model answered for one task.

    Written in the transaction that records the model call in the usage ledger, and deleted
    in the one that writes the task's memory and log row. A sweep that died in between, or
    whose consolidation step failed, leaves it: the next sweep uses it instead of paying for
    the extraction again, while the task and the extraction model are unchanged. `content`
    is the cleaned, redacted memory text; empty with a `declined_reason` when the model found
    nothing worth remembering.
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="auto_memory_draft"
    )
    extract_model = models.CharField(max_length=200)
    task_updated_at = models.DateTimeField()
    content = models.TextField(blank=True, default="")
    keywords = models.JSONField(default=list, blank=True)
    declined_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "extraction draft"

    def __str__(self) -> str:
        return f"paid extraction of task {self.task_id}"
