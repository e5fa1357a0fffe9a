"""Load benchmark: the API as `make run` serves it (gunicorn, 2 processes of 4 threads, with a
worker beside it and the shared metrics directory), driven by keep-alive HTTP clients.

Two phases against one throwaway database seeded with a project of 350 memories and 350
completed tasks (results of 4,000 characters), each with its extraction log row:

1. each read alone for --phase-seconds (default 15) with --clients clients (default 4):
   `GET /tasks/{id}`, the list reads `GET /projects/{id}/memories`, `GET /projects/{id}/tasks`
   and `GET /users/me/auto-memory-log` (each its first page, 50 of 350),
   `GET /users/me/auto-memory-settings`. A list read should reach 200 req/s with a p99 of
   50 ms or less;
2. the mix for --seconds (default 60): task create 10%, task get 30%, memory list 30%,
   settings get 30%.

Each prints, per endpoint, requests per second, p50/p95/p99 latency in milliseconds and the
errors (any status other than the expected one, or a failed connection), and the CPU
milliseconds each request cost gunicorn, the worker beside it, the local database and the
clients: on a shared machine req/s moves with the neighbours, CPU per request much less. Then
the resident memory of every server process. Throttling is off (API_THROTTLE_USER empty), as
a load test of one user would otherwise measure the throttle.

    .venv/bin/python benchmarks/bench_api_load.py --postgres postgres://postgres@127.0.0.1/postgres
    .venv/bin/python benchmarks/bench_api_load.py          # a throwaway SQLite file
    .venv/bin/python benchmarks/bench_api_load.py --seconds 20 --phase-seconds 5 --no-worker

The database, Django set-up and `--save` (the output under docs/figures/) come from
`benchmarks/harness.py`.

The clients run on the same machine as the server and the database: on 2 cores the figures
are what all three share.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE_DIR))

from benchmarks import harness  # noqa: E402

MEMORIES = 350
MIX = (("task create", 1), ("task get", 3), ("memory list", 3), ("settings get", 3))
READS = ("task get", "memory list", "task list", "log list", "feedback list", "settings get")
TASKS = 350
RESULT = "The session check now compares expiry with the server clock before it renews. " * 50
RUN_MAIN = ("WEB_WORKERS", "WEB_THREADS")


# --- The database -----------------------------------------------------------------------------


def seed() -> dict:
    """A user with a token, a project of MEMORIES memories (as the API writes them), a task."""
    from controlplane.models import Task
    from controlplane.services.memories import memory_create
    from controlplane.services.tokens import token_create

    user = harness.user_create("load")
    project = harness.project_create(user, "load")
    rng = random.Random(7)
    words = [
        "deploy",
        "through",
        "make",
        "tests",
        "use",
        "postgres",
        "redis",
        "cache",
        "login",
        "session",
        "the",
        "a",
        "of",
    ]
    for i in range(MEMORIES):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(40, 110)))
        memory_create(user=user, project=project, content=f"Memory {i}: {text}.")
    task = Task.objects.create(project=project, user=user, prompt="Fix the login bug")
    cited = completed_tasks(user, project)
    # The memories' vectors, written before the servers start: the worker's sweeper would
    # otherwise spend the first minute of the run embedding them beside the server.
    from automemory.services.vectors import embeddings_refresh

    embeddings_refresh(limit=MEMORIES * 2)
    from django.db import connection

    if connection.vendor == "postgresql":  # the statistics autovacuum keeps in a running system
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return {
        "token": token_create(user=user, name="load").key,
        "project": project.pk,
        "task": task.pk,
        "memory": cited,
    }


def completed_tasks(user, project) -> int:
    """TASKS completed tasks of the user, each with a result and its extraction log row, each
    having cited the project's newest memory (whose id is returned)."""
    from datetime import timedelta

    from django.utils import timezone

    from automemory.models import AutoMemoryLog, FeedbackKind, FeedbackVia, MemoryFeedback
    from controlplane.models import IdentityMemory, Task, TaskStatus

    now = timezone.now()
    tasks = Task.objects.bulk_create(
        Task(
            project=project,
            user=user,
            prompt=f"Task {i}: fix the flaky login test",
            status=TaskStatus.COMPLETED,
            result_text=RESULT[:4000],
            started_at=now - timedelta(minutes=i + 5),
            finished_at=now - timedelta(minutes=i),
        )
        for i in range(TASKS)
    )
    AutoMemoryLog.objects.bulk_create(
        AutoMemoryLog(
            task=task,
            user=user,
            outcome="skipped",
            reason="result_too_short",
            first_attempt_at=now - timedelta(minutes=i),
            last_attempt_at=now - timedelta(minutes=i),
        )
        for i, task in enumerate(tasks)
    )
    memory = IdentityMemory.objects.filter(project=project).latest("created_at", "id")
    MemoryFeedback.objects.bulk_create(
        MemoryFeedback(
            memory=memory, task=task, user=user, kind=FeedbackKind.CITE, via=FeedbackVia.MCP
        )
        for task in tasks
    )
    return memory.pk


# --- The server, as `make run` starts it ----------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def servers_start(env: dict, port: int, *, worker: bool, work: Path) -> list[subprocess.Popen]:
    # run_main's own figures, read from its source (importing it needs Django set up)
    source = (BASE_DIR / "controlplane/management/commands/run_main.py").read_text()
    processes_, threads = (re.search(rf"^{n} = (\d+)", source, re.M).group(1) for n in RUN_MAIN)
    log = (work / "server.log").open("wb")
    gunicorn = [
        sys.executable, "-m", "gunicorn", "controlplane.wsgi",
        "--bind", f"127.0.0.1:{port}",
        "--workers", processes_,
        "--threads", threads,
    ]  # fmt: skip
    processes = [subprocess.Popen(gunicorn, cwd=BASE_DIR, env=env, stdout=log, stderr=log)]
    if worker:
        processes.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "run_worker"],
                cwd=BASE_DIR,
                env=env,
                stdout=log,
                stderr=log,
            )
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return processes
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"gunicorn did not answer:\n{(work / 'server.log').read_text()}")


def _server_pids(processes: list[subprocess.Popen]) -> list[tuple[str, int]]:
    """(name, pid) of each server process and its children (gunicorn's workers)."""
    pids = []
    for process in processes:
        pids.append(process.pid)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        if children.exists():
            pids += [int(pid) for pid in children.read_text().split()]
    rows = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        name = "run_worker" if b"run_worker" in cmdline else "gunicorn"
        parent = int(
            next(line.split()[1] for line in status.splitlines() if line.startswith("PPid"))
        )
        if name == "gunicorn":
            name += " master" if parent == os.getpid() else " worker"
        rows.append((name, pid))
    return rows


def process_tree_rss(processes: list[subprocess.Popen]) -> list[tuple[str, int]]:
    """(name, RSS in KiB) of each server process and its children (gunicorn's workers)."""
    rows = []
    for name, pid in _server_pids(processes):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
        rows.append((f"{name} (pid {pid})", rss))
    return rows


# --- Where the CPU goes -----------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU of one process so far (0 once it is gone); with `reaped`, also that
    of its children it has waited for."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def _database_cpu() -> float:
    """CPU of the local PostgreSQL server so far: the postmaster, its live backends and those
    that have exited (their time moves into the postmaster's reaped children's), so a backend
    that closes during a phase is not lost. 0 when no local server is visible."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    processes[int(entry.name)] = _stat(int(entry.name))
            except OSError:
                continue
    total = 0.0
    for pid, fields in processes.items():
        if fields is None:
            continue
        is_postmaster = int(fields[1]) not in processes
        total += _cpu_seconds(pid, reaped=is_postmaster)
    return total


class CpuMeter:
    """CPU spent during a phase by gunicorn's processes, the worker, the local database and
    the load clients: machine-independent cost per request, where req/s on a
    shared 2-core machine is not."""

    def __init__(self, processes: list[subprocess.Popen]) -> None:
        pids = _server_pids(processes)
        self.gunicorn = [pid for name, pid in pids if name.startswith("gunicorn")]
        self.worker = [pid for name, pid in pids if name == "run_worker"]

    def __enter__(self) -> CpuMeter:
        self.start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        self.spent = {key: value - self.start[key] for key, value in self._sample().items()}

    def _sample(self) -> dict[str, float]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            "gunicorn": sum(map(_cpu_seconds, self.gunicorn)),
            "worker": sum(map(_cpu_seconds, self.worker)),
            "database": _database_cpu(),
            "clients": children.ru_utime + children.ru_stime,
        }

    def report(self, requests: int) -> None:
        per = {key: value * 1000 / max(requests, 1) for key, value in self.spent.items()}
        print(
            "  CPU ms per request: "
            + ", ".join(f"{key} {value:.2f}" for key, value in per.items())
            + f", all {sum(per.values()):.2f}"
        )


# --- The clients ----------------------------------------------------------------------------


def client(port: int, seed: dict, names: list[str], weights: list[int], seconds: float, queue):
    """One keep-alive connection; sends requests until `seconds` pass; reports each."""
    rng = random.Random(os.getpid())
    auth = {"Authorization": f"Token {seed['token']}", "Content-Type": "application/json"}
    requests = {
        "task create": ("POST", f"/projects/{seed['project']}/tasks", 201),
        "task get": ("GET", f"/tasks/{seed['task']}", 200),
        "memory list": ("GET", f"/projects/{seed['project']}/memories", 200),
        "task list": ("GET", f"/projects/{seed['project']}/tasks", 200),
        "log list": ("GET", "/users/me/auto-memory-log", 200),
        "feedback list": ("GET", f"/memories/{seed['memory']}/feedback", 200),
        "settings get": ("GET", "/users/me/auto-memory-settings", 200),
    }
    body = json.dumps({"prompt": "Add a test for the login fix"})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    results: list[tuple[str, float, bool]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        name = rng.choices(names, weights)[0]
        method, path, expected = requests[name]
        started = time.perf_counter()
        try:
            connection.request(method, path, body=body if method == "POST" else None, headers=auth)
            response = connection.getresponse()
            response.read()
            ok = response.status == expected
        except (OSError, http.client.HTTPException):
            ok = False
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        results.append((name, time.perf_counter() - started, ok))
    queue.put(results)


def drive(port: int, seed: dict, mix: tuple, clients: int, seconds: float) -> dict:
    names, weights = [n for n, _ in mix], [w for _, w in mix]
    queue = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=client, args=(port, seed, names, weights, seconds, queue))
        for _ in range(clients)
    ]
    for process in workers:
        process.start()
    results = [row for _ in workers for row in queue.get()]
    for process in workers:
        process.join()
    by_name: dict[str, list] = {}
    for name, latency, ok in results:
        by_name.setdefault(name, []).append((latency, ok))
    return {name: rows for name, rows in by_name.items()}


def report(title: str, by_name: dict, seconds: float) -> None:
    print(title)
    print(
        f"  {'endpoint':<14} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'errors':>7}"
    )
    order = [n for n, _ in MIX] + [n for n in READS if n not in dict(MIX)]
    for name in [n for n in order if n in by_name]:
        rows = by_name[name]
        latencies = sorted(latency * 1000 for latency, _ in rows)
        cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
        errors = sum(1 for _, ok in rows if not ok)
        print(
            f"  {name:<14} {len(rows) / seconds:>7.0f} {cuts[49]:>7.1f} {cuts[94]:>7.1f} "
            f"{cuts[98]:>7.1f} {errors:>7}"
        )


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=60, help="length of the mix")
    parser.add_argument("--phase-seconds", type=float, default=15, help="each read alone")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--no-worker", action="store_true", help="gunicorn only")
    args = parser.parse_args()
    with harness.run(args) as bench, tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        work = Path(tmp)
        (work / "metrics").mkdir()
        seeded = seed()
        from django.db import connections

        connections.close_all()
        env = harness.child_env(
            os.environ["DATABASE_URL"],
            DEBUG="False",
            ALLOWED_HOSTS="127.0.0.1",
            API_THROTTLE_USER="",
            PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"),  # as run_main sets it
        )
        port = free_port()
        processes = servers_start(env, port, worker=not args.no_worker, work=work)
        try:
            print(
                f"gunicorn 2 x 4 threads{'' if args.no_worker else ' + 1 worker'}, "
                f"{bench.vendor}, {args.clients} clients, {os.cpu_count()} CPUs, load average "
                f"{os.getloadavg()[0]:.1f} at start"
            )
            warm = (("memory list", 1), ("task get", 1))
            drive(port, seeded, warm, args.clients, 3)
            for name in READS:
                with CpuMeter(processes) as cpu:
                    by_name = drive(port, seeded, ((name, 1),), args.clients, args.phase_seconds)
                report(f"{name} alone, {args.phase_seconds:g} s:", by_name, args.phase_seconds)
                cpu.report(len(by_name[name]))
            with CpuMeter(processes) as cpu:
                by_name = drive(port, seeded, MIX, args.clients, args.seconds)
            report(f"mix, {args.seconds:g} s:", by_name, args.seconds)
            cpu.report(sum(map(len, by_name.values())))
            print("resident memory at the end:")
            for name, rss in process_tree_rss(processes):
                print(f"  {name:<32} {rss / 1024:>6.0f} MiB")
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


if __name__ == "__main__":
    main()
