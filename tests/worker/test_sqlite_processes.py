"""Several worker processes share one SQLite file (WAL, busy timeout, immediate writes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]

SEED = """
from django.contrib.auth import get_user_model
from automemory.models import AutoMemorySettings
from controlplane.services.projects import project_create
from controlplane.services.tasks import task_create

user = get_user_model().objects.create_user("sqlite-worker")
AutoMemorySettings.objects.create(user=user, generate_memories=True, idle_seconds=0,
                                  min_duration_seconds=0, min_result_chars=5)
project = project_create(user=user, name="shared file")
for i in range(150):
    task_create(user=user, project=project, prompt=f"Goal {i % 10}\\nstep {i}")
"""

REPORT = """
import json
from collections import Counter
from controlplane.models import IdentityMemory, Task
from worker.models import TaskRun

runs = Counter(TaskRun.objects.values_list("task_id", flat=True))
auto = IdentityMemory.objects.filter(source="auto")
print(json.dumps({
    "statuses": dict(Counter(Task.objects.values_list("status", flat=True))),
    "max_runs_per_task": max(runs.values()),
    "workers": len(set(TaskRun.objects.values_list("worker_id", flat=True))),
    "auto_memories": auto.count(),
    "active": auto.filter(status="active").count(),
}))
"""


def manage(env, *args, **kwargs):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
        **kwargs,
    )


def test_three_workers_share_one_sqlite_file(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'shared.sqlite3'}",
        "LOG_LEVEL": "WARNING",
        "WORKER_EXECUTOR": "echo",
    }
    manage(env, "migrate", "-v0")
    manage(env, "shell", "-c", SEED)
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_worker", "--once", "--worker-id", f"w{i}"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-2000:]
        assert "database is locked" not in err

    report = json.loads(manage(env, "shell", "-c", REPORT).stdout.strip().splitlines()[-1])
    assert report["statuses"] == {"completed": 150}
    assert report["max_runs_per_task"] == 1
    assert report["auto_memories"] == 150
    assert report["active"] == 10, "one active memory per goal"
