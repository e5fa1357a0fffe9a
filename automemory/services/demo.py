"""The auto memory loop, shown on the demo project (`manage.py demo_auto_memory`)."""

from dataclasses import dataclass, field

from django.core.management import call_command

from automemory.models import AutoMemoryLog
from automemory.services.preferences import settings_update
from controlplane.models import IdentityMemory, MemorySource, Task
from controlplane.services.demo import demo_setup
from controlplane.services.tasks import task_create

# Gates relaxed so the echo executor's instant runs qualify at once.
DEMO_SETTINGS = {
    "generate_memories": True,
    "use_memories": True,
    "idle_seconds": 0,
    "min_duration_seconds": 0,
    "min_result_chars": 40,
}
FIRST_TASKS = [
    "Document how to run the test suite\n"
    "Record that `make test` runs pytest on SQLite, and DATABASE_URL=postgres://ci:"
    "s3cr3t-Passw0rd@127.0.0.1:5432/ci switches it to PostgreSQL. Keep it short and factual.",
    "ok",
]
NEXT_TASK = "Add a CI badge to the README"


@dataclass
class DemoLoop:
    """What the demo did: tasks run, the log of the first round, memories, the next task."""

    token: str
    project_id: int
    first_tasks: list[Task] = field(default_factory=list)
    log: list[AutoMemoryLog] = field(default_factory=list)
    memories: list[IdentityMemory] = field(default_factory=list)
    next_task: Task | None = None
    already_done: bool = False


def demo_loop_run(*, executor: str = "echo") -> DemoLoop:
    """Turn auto memory on for the demo user and run the loop once, unless it already ran.

    Round one runs two tasks (one worth remembering, one too short) and extracts a memory;
    round two runs a new task, whose first turn receives that memory.
    """
    demo = demo_setup()
    settings_update(user=demo.user, changes=DEMO_SETTINGS)
    loop = DemoLoop(token=demo.token, project_id=demo.project.pk)
    auto_memories = IdentityMemory.objects.filter(
        project=demo.project, source=MemorySource.AUTO
    ).order_by("id")
    if auto_memories.exists():
        loop.already_done = True
        loop.memories = list(auto_memories)
        return loop

    loop.first_tasks = [
        task_create(user=demo.user, project=demo.project, prompt=prompt) for prompt in FIRST_TASKS
    ]
    _run_worker_round(executor)
    loop.log = list(AutoMemoryLog.objects.filter(task__in=loop.first_tasks).order_by("task_id"))
    loop.memories = list(auto_memories)
    loop.next_task = task_create(user=demo.user, project=demo.project, prompt=NEXT_TASK)
    _run_worker_round(executor)
    loop.next_task.refresh_from_db()
    return loop


def _run_worker_round(executor: str) -> None:
    call_command("run_worker", "--once", "--executor", executor, "--worker-id", "demo", verbosity=0)
