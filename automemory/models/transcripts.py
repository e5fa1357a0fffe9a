"""What another member reads of a task's text, kept once cleaned of its user's private notes."""

from django.db import models

from controlplane.models import Task


class TaskTextCleaned(models.Model):
    """A task's text (its result, its failure reason) of one turn as other members read it,
    keyed by what it was made from: the text (its length and CRC-32: a clash could only
    show an older cleaned text, never a private note) and the key the notes' fingerprints
    are hashed with. `text` is None when nothing had to be taken out."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    turn = models.PositiveIntegerField()
    source = models.CharField(max_length=64)
    text = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "automemory_task_text_cleaned"
        constraints = [
            models.UniqueConstraint(
                fields=["task", "turn", "source"], name="task_text_cleaned_once"
            )
        ]

    def __str__(self) -> str:
        return f"cleaned text of task {self.task_id}, turn {self.turn}"
