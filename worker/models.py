"""What the worker records beside the task row: worker processes and the runs of each task."""

from django.db import models
from django.db.models import Q

from controlplane.models import Task, choices_check


class WorkerProcess(models.Model):
    """A `run_worker` process: registered at start, seen every round, stopped at exit."""

    worker_id = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    executor = models.CharField(max_length=32, blank=True, default="")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    code_signature = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",  # an insert that leaves the column out (a worker without it) gets ""
        help_text="SHA-256 of the code it started with (worker/code_signature.py).",
    )

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
            choices_check("outcome", RunOutcome, "taskrun_outcome_valid"),
        ]

    def __str__(self) -> str:
        return f"run of task {self.task_id} turn {self.turn} ({self.outcome})"


class SessionStorage(models.TextChoices):
    DATABASE = "database", "Database"
    OBJECT = "object", "Object storage"


class CodexSession(models.Model):
    """A codex thread's session record: its session files, kept centrally after every turn.

    Written and read only by the session store (`worker.codex.session_store`); the model is
    here because Django finds an app's models in its `models` module. The session (rollout)
    files the CLI wrote for the thread, as one gzip-compressed tar (the session archive, see
    `worker.codex.session_files`), held in `data` or in object storage under
    `object_name`. Any worker that resumes the thread restores it into its own `CODEX_HOME`.
    `sha256` and `size` describe the thread's latest files, also when they could not be held
    (too large, storage unreachable): `stored_size` is then null and `error` says why, so a
    resume elsewhere fails with that reason rather than continuing from an older state.
    """

    thread_id = models.CharField(max_length=200, unique=True)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="codex_sessions")
    turn = models.PositiveIntegerField(help_text="The task turn whose end this record holds.")
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the uncompressed archive.")
    size = models.PositiveBigIntegerField(help_text="Bytes of the uncompressed archive.")
    file_count = models.PositiveIntegerField()
    storage = models.CharField(max_length=16, choices=SessionStorage.choices)
    stored_size = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Bytes held (compressed); empty when not held."
    )
    data = models.BinaryField(null=True, blank=True, editable=False)
    object_name = models.CharField(max_length=400, blank=True, default="")
    error = models.TextField(blank=True, default="", help_text="Why the latest files are not held.")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "worker_codex_sessions"
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["updated_at"], name="codexsession_updated_idx")]
        constraints = [
            choices_check("storage", SessionStorage, "codexsession_storage_valid"),
            # Held (a size, no error) or not held (no size, an error saying why).
            models.CheckConstraint(
                condition=(Q(stored_size__isnull=False) & Q(error=""))
                | (Q(stored_size__isnull=True) & ~Q(error="")),
                name="codexsession_held_or_error",
            ),
            # Held in the database: the bytes are in `data`; in object storage: a name; not
            # held: neither.
            models.CheckConstraint(
                condition=Q(stored_size__isnull=True, data__isnull=True, object_name="")
                | Q(storage=SessionStorage.DATABASE, data__isnull=False, object_name="")
                | Q(storage=SessionStorage.OBJECT, data__isnull=True) & ~Q(object_name=""),
                name="codexsession_payload_where_stored",
            ),
        ]

    def __str__(self) -> str:
        return f"codex session {self.thread_id} (task {self.task_id} turn {self.turn})"


class BranchStorage(models.TextChoices):
    REMOTE = "remote", "Pushed to the remote"
    DATABASE = "database", "Bundle in the database"
    OBJECT = "object", "Bundle in object storage"


class TaskBranch(models.Model):
    """Where a task's own branch (`controlplane/task-<id>`) is kept between turns, so the
    next turn starts from it on any host: pushed to the repository's remote, or a git bundle
    of its commits since the base commit, in `data` or in object storage under
    `object_name`. Written by the worker that holds the task after each turn that changed
    files; the task's `head_commit` (written when the turn finishes) says which commit of it
    the next turn starts from."""

    task = models.OneToOneField(
        Task, on_delete=models.CASCADE, primary_key=True, related_name="stored_branch"
    )
    turn = models.PositiveIntegerField(help_text="The turn whose end this record holds.")
    base_commit = models.CharField(max_length=64)
    head_commit = models.CharField(max_length=64)
    storage = models.CharField(max_length=16, choices=BranchStorage.choices)
    size = models.PositiveBigIntegerField(default=0, help_text="Bytes of the bundle (0: pushed).")
    sha256 = models.CharField(max_length=64, blank=True, default="")
    data = models.BinaryField(null=True, blank=True, editable=False)
    object_name = models.CharField(max_length=400, blank=True, default="")
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "worker_task_branches"
        constraints = [
            choices_check("storage", BranchStorage, "taskbranch_storage_valid"),
            # A bundle in the database has its bytes; in object storage, a name; pushed: neither.
            models.CheckConstraint(
                condition=Q(storage=BranchStorage.REMOTE, data__isnull=True, object_name="")
                | Q(storage=BranchStorage.DATABASE, data__isnull=False, object_name="")
                | Q(storage=BranchStorage.OBJECT, data__isnull=True) & ~Q(object_name=""),
                name="taskbranch_payload_where_stored",
            ),
        ]

    def __str__(self) -> str:
        return f"branch of task {self.task_id} at {self.head_commit[:12]} ({self.storage})"
