"""How many tasks received each memory, per day: what the memory-health page counts."""

from django.db import models

from controlplane.models import IdentityMemory


class MemoryInjectionDay(models.Model):
    """The tasks whose first turn received `memory` on `day` (the server's local date), one
    row per memory and day, counted up by each injection in its own transaction. The
    health page sums these rows, so its cost follows the memories and days, not the tasks."""

    memory = models.ForeignKey(IdentityMemory, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    tasks = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "automemory_memory_injection_days"
        constraints = [
            models.UniqueConstraint(fields=["memory", "day"], name="memory_injection_day_once")
        ]
        indexes = [models.Index(fields=["day", "memory"], name="memory_injection_day_idx")]

    def __str__(self) -> str:
        return f"memory {self.memory_id} received by {self.tasks} tasks on {self.day}"
