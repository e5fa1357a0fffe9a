"""What the worker records beside the task row: worker processes and the runs of each task."""

from django.db import models
from django.db.models import Q

from controlplane.models import Task


class WorkerProcess(models.Model):
    """A `run_worker` process: registered at start, seen every round, stopped at exit."""

    worker_id = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    executor = models.CharField(max_length=32, blank=True, default="")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "worker_processes"
        ordering = ["-started_at", "-id"]
        verbose_name_plural = "worker processes"

    def __str__(self) -> str:
        return self.worker_id


class RunOutcome(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    REFUSED = "refused", "Refused (quota)"
    REQUEUED = "requeued", "Re-queued at shutdown"
    LOST = "lost", "Lost (stale heartbeat, recovered)"


class TaskRun(models.Model):
    """One execution attempt of one turn of a task by one worker.

    A claim opens a run; finishing, refusing, re-queueing or recovering the task closes it.
    The database allows one open run per task: two workers can never both hold a task.
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="worker_runs")
    turn = models.PositiveIntegerField()
    is_resume = models.BooleanField(default=False)
    worker_id = models.CharField(max_length=200)
    executor = models.CharField(max_length=32, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=RunOutcome.choices, default=RunOutcome.RUNNING
    )

    class Meta:
        db_table = "worker_task_runs"
        ordering = ["id"]
        indexes = [models.Index(fields=["task", "turn"], name="taskrun_task_turn_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(outcome="running"),
                name="taskrun_one_open_run_per_task",
            ),
            models.CheckConstraint(
                condition=Q(outcome__in=[o.value for o in RunOutcome]),
                name="taskrun_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"run of task {self.task_id} turn {self.turn} ({self.outcome})"
