"""A project's code: its repository (one per project), and what a task's turns changed in it."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.models.projects import Project
from controlplane.models.tasks import Task

# What the API and the admin show of a repository: never its credential, only whether one is
# set.
REPOSITORY_SHOWN_FIELDS = (
    "url",
    "default_branch",
    "credential_set",
    "credential_set_at",
    "remote_status",
    "last_checked_at",
    "last_reached_at",
    "last_error",
)


class Repository(models.Model):
    """The git repository a project's tasks work on. The credential is stored encrypted
    (`controlplane.credentials`) and never returned; workers record whether they reached the
    remote at every fetch."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="repository")
    url = models.CharField(max_length=2048)
    default_branch = models.CharField(max_length=255)
    # A Fernet token of the credential (a token for https, a private key for ssh); "" for none.
    credential_ciphertext = models.TextField(blank=True, default="", editable=False)
    credential_set_at = models.DateTimeField(null=True, blank=True)
    # The latest fetch by a worker: when it was tried, when one last succeeded, and why the
    # latest failed ("" when it did not).
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_reached_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "repositories"
        ordering = ["id"]
        verbose_name_plural = "repositories"
        constraints = [
            models.CheckConstraint(condition=~Q(url=""), name="repository_url_not_empty"),
            models.CheckConstraint(
                condition=~Q(default_branch=""), name="repository_default_branch_not_empty"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url} ({self.default_branch})"

    @property
    def credential_set(self) -> bool:
        return bool(self.credential_ciphertext)

    @property
    def remote_status(self) -> str:
        """`unchecked` (no worker fetched yet), `reachable` or `unreachable`."""
        if self.last_checked_at is None:
            return "unchecked"
        return "unreachable" if self.last_error else "reachable"


class TaskDiff(models.Model):
    """The unified diff of a task's branch against its base commit, as its latest finished
    turn left it: written by the worker in the transaction that finishes the turn, bounded
    (`truncated` says when it was cut), read by `GET /tasks/{id}/diff` and the console."""

    task = models.OneToOneField(
        Task, on_delete=models.CASCADE, primary_key=True, related_name="diff"
    )
    base_commit = models.CharField(max_length=64)
    head_commit = models.CharField(max_length=64)
    diff = models.TextField(blank=True, default="")
    # The whole diff's size in bytes, and whether `diff` holds only its beginning.
    diff_bytes = models.PositiveBigIntegerField(default=0)
    truncated = models.BooleanField(default=False)
    files_changed = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "task_diffs"

    def __str__(self) -> str:
        return f"diff of task {self.task_id} ({self.base_commit[:12]}..{self.head_commit[:12]})"
