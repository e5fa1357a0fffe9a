"""Several processes sweeping at once on PostgreSQL keep the memory invariants."""

import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection
from django.utils import timezone

from automemory.models import AutoMemoryLog, AutoMemorySettings
from controlplane.models import IdentityMemory, Membership, Project, Role, Task, TaskStatus

BASE_DIR = Path(__file__).resolve().parents[2]
SWEEP = (
    "import sys;"
    "from django.contrib.auth import get_user_model;"
    "from automemory.services.extraction.sweep import process_auto_memories;"
    "user = get_user_model().objects.get(username=sys.argv[1]) if sys.argv[1:] else None;"
    "[process_auto_memories(user=user, force=bool(user)) for _ in range(3)]"
)


def database_url() -> str:
    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def start_sweep(username: str | None) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
    }
    code = f"import django; django.setup(); exec({SWEEP!r})"
    args = [sys.executable, "-c", code] + ([username] if username else [])
    return subprocess.Popen(
        args, cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_write_one_memory_per_task_and_one_active_per_goal(
    user_factory,
):
    users = [user_factory(f"sweeper{i}") for i in range(3)]
    projects = []
    for index in range(2):
        project = Project.objects.create(name=f"p{index}", created_by=users[0])
        for user in users:
            Membership.objects.create(
                project=project, user=user, role=Role.OWNER if user == users[0] else Role.MEMBER
            )
        projects.append(project)
    for user in users:
        AutoMemorySettings.objects.create(user=user, generate_memories=True)
    now = timezone.now()
    tasks = []
    for i in range(120):
        finished = now - timedelta(hours=2, seconds=i)
        tasks.append(
            Task(
                project=projects[i % 2],
                user=users[i % 3],
                prompt=f"Goal number {i % 7}\nbody",
                status=TaskStatus.COMPLETED,
                started_at=finished - timedelta(minutes=3),
                finished_at=finished,
                result_text=f"result {i} " * 40,
            )
        )
    Task.objects.bulk_create(tasks)

    processes = [start_sweep(None) for _ in range(3)] + [start_sweep(u.username) for u in users]
    for process in processes:
        _, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-3000:]

    auto = IdentityMemory.objects.filter(source="auto")
    per_task = Counter(auto.values_list("source_task_id", flat=True))
    assert len(per_task) == 120 and set(per_task.values()) == {1}
    active = Counter(
        auto.filter(status="active").values_list("project_id", "auto_memory_goal__goal_key")
    )
    assert len(active) == 14 and set(active.values()) == {1}
    assert AutoMemoryLog.objects.filter(outcome="extracted").count() == 120
    for project_id, key in active:
        group = auto.filter(project_id=project_id, auto_memory_goal__goal_key=key)
        winner = group.get(status="active")
        finished = {m.pk: m.auto_memory_goal.source_finished_at for m in group}
        assert finished[winner.pk] == max(finished.values())
        assert all(m.superseded_by_id is not None for m in group.filter(status="superseded"))
