"""`manage.py workers`: the worker processes, their last heartbeat, the code they run and the
tasks they hold."""

import json

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from worker.code_signature import code_signature_matches, code_signature_newest
from worker.processes import workers_status_list

COLUMNS = (
    "WORKER",
    "STATE",
    "EXECUTOR",
    "HOST",
    "PID",
    "STARTED",
    "LAST SEEN",
    "CODE",
    "NEWEST",
    "TASKS",
)


class Command(BaseCommand):
    help = (
        "List worker processes: executor, host and pid, last heartbeat, the tasks they hold, "
        "whether they look alive (seen within WORKER_STALE_AFTER_SECONDS), the signature of "
        "the code they run and whether it is the newest one running workers report."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--all",
            action="store_true",
            dest="include_stopped",
            help="Include stopped workers (newest first).",
        )
        parser.add_argument("--limit", type=int, default=100, help="At most this many rows.")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="One JSON array, for scripts."
        )

    def handle(self, *args, include_stopped=False, limit=100, as_json=False, **options):
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        now = timezone.now()
        statuses = workers_status_list(include_stopped=include_stopped, limit=limit, now=now)
        newest = code_signature_newest()
        if as_json:
            self.stdout.write(
                json.dumps([_as_dict(status, now, newest) for status in statuses], indent=2)
            )
            return
        if not statuses:
            self.stdout.write("No running workers." if not include_stopped else "No workers.")
            return
        rows = [COLUMNS] + [_as_row(status, now, newest) for status in statuses]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        for row in rows:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )


def _as_dict(status, now, newest: str) -> dict:
    process = status.process
    return {
        "worker_id": process.worker_id,
        "state": status.state,
        "executor": process.executor,
        "hostname": process.hostname,
        "pid": process.pid,
        "started_at": process.started_at.isoformat(),
        "last_seen_at": process.last_seen_at.isoformat(),
        "seconds_since_seen": round((now - process.last_seen_at).total_seconds(), 1),
        "stopped_at": process.stopped_at.isoformat() if process.stopped_at else None,
        "code_signature": process.code_signature,
        "code_newest": code_signature_matches(signature=process.code_signature, newest=newest),
        "task_ids": status.task_ids,
    }


def _as_row(status, now, newest: str) -> tuple[str, ...]:
    process = status.process
    seen = (now - process.last_seen_at).total_seconds()
    matches = code_signature_matches(signature=process.code_signature, newest=newest)
    return (
        process.worker_id,
        status.state,
        process.executor or "-",
        process.hostname or "-",
        str(process.pid) if process.pid is not None else "-",
        process.started_at.strftime("%Y-%m-%d %H:%M:%S"),
        f"{seen:.0f}s ago",
        process.code_signature[:12] or "-",
        {True: "yes", False: "NO", None: "-"}[matches],
        ", ".join(str(task_id) for task_id in status.task_ids) or "-",
    )
