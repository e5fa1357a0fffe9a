"""Logs: one record per 4xx, worker and task ids on every worker line, plain and JSON formats."""

import json
import logging
import os
import subprocess
import sys
import time

import pytest
from django.conf import settings

from controlplane.logging import JsonFormatter, LogContextFilter, log_context
from controlplane.models import Task, TaskStatus
from worker.executors import ExecutionResult
from worker.loop import Worker

BASE_DIR = settings.BASE_DIR


def _console_handler() -> logging.Handler:
    [handler] = [h for h in logging.getLogger().handlers if h.name == "console"]
    return handler


def _record(message="hello", *, name="worker.loop", level=logging.INFO, exc_info=None):
    return logging.LogRecord(name, level, __file__, 1, message, None, exc_info)


# --- Each 4xx once ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "status_code"),
    [
        ("bad body", 400),
        ("malformed json", 400),
        ("no token", 401),
        ("bad token", 401),
        ("viewer writes", 403),
        ("unknown task", 404),
        ("wrong method", 405),
        ("body too large", 413),
    ],
)
def test_each_4xx_makes_one_log_record(
    case, status_code, caplog, api_client_for, alice, vera, project
):
    client = api_client_for(vera if case == "viewer writes" else alice)
    tasks = f"/projects/{project.pk}/tasks"
    requests = {
        "bad body": lambda: client.post(tasks, {"prompt": ""}, format="json"),
        "malformed json": lambda: client.post(tasks, b"{bad", content_type="application/json"),
        "no token": lambda: api_client_for(None).get("/projects"),
        "bad token": lambda: (
            client.credentials(HTTP_AUTHORIZATION="Token nope") or client.get("/projects")
        ),
        "viewer writes": lambda: client.post(tasks, {"prompt": "hi"}, format="json"),
        "unknown task": lambda: client.get("/tasks/999999"),
        "wrong method": lambda: client.delete("/projects"),
        "body too large": lambda: client.post(
            tasks, b'{"prompt": "' + b"x" * 2_000_000 + b'"}', content_type="application/json"
        ),
    }
    caplog.set_level(logging.DEBUG)

    response = requests[case]()

    assert response.status_code == status_code
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.status_code) for r in records] == [("django.request", status_code)]


def test_a_4xx_goes_to_the_console_once(settings, caplog, api_client_for):
    # Django's own "django" console handler writes only with DEBUG on, beside the root's.
    settings.DEBUG = True
    caplog.set_level(logging.INFO)
    api_client_for(None).get("/projects")
    [record] = [r for r in caplog.records if r.name == "django.request"]

    writers = []
    logger = logging.getLogger(record.name)
    while logger is not None:
        writers += [
            h
            for h in logger.handlers
            if h is not caplog.handler
            and type(h).__module__ != "_pytest.logging"
            and record.levelno >= h.level
            and h.filter(record)
        ]
        logger = logger.parent if logger.propagate else None

    assert writers == [_console_handler()]


def test_runserver_access_lines_leave_out_what_django_request_logged():
    access = logging.getLogger("django.server")
    line = _record('"GET /projects HTTP/1.1" 401 58', name="django.server")
    line.status_code = 401
    ok_line = _record('"GET /projects HTTP/1.1" 200 58', name="django.server")
    ok_line.status_code = 200

    assert access.filter(line) is False
    assert access.filter(ok_line) is True


# --- Formats and context ----------------------------------------------------------------------


def test_plain_lines_name_the_worker_and_the_task_when_known():
    handler = _console_handler()

    def formatted(record):
        assert handler.filter(record)
        return handler.format(record)

    with log_context(worker_id="w1"):
        with log_context(task_id=7):
            inside_task = formatted(_record("task 7 started"))
        between_tasks = formatted(_record("round done"))
    outside = formatted(_record("hello", name="django.request"))

    assert inside_task.endswith(" INFO worker.loop [worker=w1 task=7]: task 7 started")
    assert between_tasks.endswith(" INFO worker.loop [worker=w1]: round done")
    assert outside.endswith(" INFO django.request: hello")


def test_json_lines_carry_the_ids_and_the_traceback():
    formatter, context = JsonFormatter(), LogContextFilter()
    try:
        raise ValueError("boom")
    except ValueError:
        failing = _record("executor raised", level=logging.ERROR, exc_info=sys.exc_info())
    with log_context(worker_id="w1", task_id=7):
        context.filter(failing)
    plain = _record("between tasks")
    context.filter(plain)

    line = json.loads(formatter.format(failing))
    assert {k: line[k] for k in ("level", "name", "message", "worker_id", "task_id")} == {
        "level": "ERROR",
        "name": "worker.loop",
        "message": "executor raised",
        "worker_id": "w1",
        "task_id": 7,
    }
    assert "ValueError: boom" in line["exc_info"]
    assert line["time"]
    assert json.loads(formatter.format(plain))["task_id"] is None


def test_an_unknown_log_format_is_refused():
    env = {**os.environ, "LOG_FORMAT": "xml"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "LOG_FORMAT must be plain or json, not 'xml'" in done.stderr


# --- The worker's lines -----------------------------------------------------------------------


class SlowEcho:
    name = "slow-echo"

    def execute(self, request, *, control):
        logging.getLogger("some.executor.module").info("agent says hi")
        time.sleep(0.4)
        return ExecutionResult(status="completed", result_text=request.text)


@pytest.mark.django_db(transaction=True)
def test_every_worker_line_carries_the_worker_id_and_the_task_id_while_it_runs(
    caplog, project, task_factory
):
    first, second = task_factory(project), task_factory(project, is_resume=True)
    caplog.handler.addFilter(LogContextFilter())
    caplog.set_level(logging.INFO)
    worker = Worker(
        executor=SlowEcho(),
        worker_id="w-log",
        poll_interval=0,
        heartbeat_seconds=0.05,
        progress_log_seconds=0.1,
    )

    worker.run_once()

    lines = [(r.worker_id, r.task_id, r.getMessage()) for r in caplog.records]
    assert all(worker_id == "w-log" for worker_id, _, _ in lines), lines
    assert ("w-log", None, "worker w-log started (executor slow-echo, poll 0s)") in lines
    user, proj = first.user_id, project.pk
    for task, resume in ((first, ""), (second, " (resume)")):
        mine = [message for _, task_id, message in lines if task_id == task.pk]
        assert mine[0] == (
            f"task {task.pk} turn 1{resume}: started "
            f"(executor slow-echo, user {user}, project {proj})"
        )
        assert "agent says hi" in mine
        assert any(m.startswith(f"task {task.pk} turn 1 still running after") for m in mine)
        assert mine[-1].startswith(f"task {task.pk} turn 1{resume}: completed in")
    assert Task.objects.filter(status=TaskStatus.COMPLETED).count() == 2
    caplog.handler.filters.clear()


def test_a_json_worker_writes_one_json_object_a_line(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'json.sqlite3'}",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
    }
    seed = (
        "from django.contrib.auth import get_user_model\n"
        "from controlplane.services.projects import project_create\n"
        "from controlplane.services.tasks import task_create\n"
        "user = get_user_model().objects.create_user('json-logs')\n"
        "project = project_create(user=user, name='json')\n"
        "print(task_create(user=user, project=project, prompt='hello').pk)\n"
    )

    def manage(*args):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )

    manage("migrate", "-v0")
    task_id = int(manage("shell", "-c", seed).stdout.strip().splitlines()[-1])
    done = manage("run_worker", "--once", "--executor", "echo", "--worker-id", "w-json")

    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(line["worker_id"] == "w-json" for line in lines), done.stderr
    started = [line for line in lines if line["message"].startswith(f"task {task_id} turn 1: st")]
    assert [(line["level"], line["name"], line["task_id"]) for line in started] == [
        ("INFO", "worker.loop", task_id)
    ]
