"""Benchmark: codex session records, written after every turn and restored on another host.

Two parts, on the database named (a throwaway SQLite file, or a throwaway PostgreSQL
database) and, with --s3, in a real S3-compatible server (moto's server mode) on 127.0.0.1:

1. The real codex CLI (the version the tests pin, from .cache/) against the tests' local fake
   Responses server: one task, --turns turns, each on the next of three CODEX_HOMEs, through
   the worker loop. Per turn: the rollout file's size, the stored (compressed) size, the time
   to store after the run and to restore before it (every turn after the first restores,
   since its host never saw the previous turn).
2. Synthetic rollout files of 1, 10 and 50 MB (JSON lines like the CLI's, with tool output
   that compresses like real output): store and restore times, the median of 5.

    .venv/bin/python benchmarks/bench_codex_sessions.py [--turns 10] [--s3] [--save]
    .venv/bin/python benchmarks/bench_codex_sessions.py --postgres postgres://postgres@127.0.0.1/postgres

The database, Django set-up and `--save` come from `benchmarks/harness.py`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE_DIR))

from benchmarks import harness  # noqa: E402

THREAD = "01a23200-69c4-7910-850a-77f278fe2da7"
SYNTHETIC_MB = (1, 10, 50)
REPEATS = 5


class Timed:
    """Wraps SessionStore.store/restore to record (operation, turn, seconds, outcome)."""

    def __init__(self):
        from worker.codex import session_store

        self.rows: list[tuple[str, int, float, str]] = []
        store_class = session_store.SessionStore
        for operation in ("store", "restore"):
            real = getattr(store_class, operation)

            def timed(this, *, thread_id, home, _real=real, _op=operation):
                started = time.perf_counter()
                outcome = _real(this, thread_id=thread_id, home=home)
                self.rows.append((_op, this.holder.turn, time.perf_counter() - started, outcome))
                return outcome

            setattr(store_class, operation, timed)

    def seconds(self, operation: str, turn: int) -> float | None:
        for op, at, seconds, _ in self.rows:
            if op == operation and at == turn:
                return seconds
        return None


def config_toml(base_url: str) -> str:
    return f"""
model = "bench-model"
model_provider = "fake"

[model_providers.fake]
name = "fake Responses API"
base_url = "{base_url}"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""


def real_cli_turns(*, turns: int, label: str, work: Path) -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from controlplane.models import Membership, Project, Role, Task, TaskStatus
    from tests.worker.real_codex.conftest import codex_binary
    from tests.worker.real_codex.responses_server import Reply, ResponsesServer, message
    from worker.codex import CodexExecutor
    from worker.codex.session_files import session_files
    from worker.egress import url_destination
    from worker.loop import Worker
    from worker.models import CodexSession

    binary = codex_binary()
    if binary is None:
        print("  (the real codex CLI is not installed: run `make codex-cli`)")
        return
    settings.WORKER_CODEX_BINARY = str(binary)
    settings.WORKER_AGENT_ENV = ["FAKE_MODEL_API_KEY"]
    settings.WORKER_CODEX_SANDBOX = "read-only"
    settings.WORKER_CODEX_MODEL = "bench-model"
    os.environ["FAKE_MODEL_API_KEY"] = "sk-bench-not-a-secret"
    user = get_user_model().objects.create_user(username=f"bench-{label}-{os.getpid()}")
    project = Project.objects.create(name=f"bench {label}", created_by=user)
    Membership.objects.create(project=project, user=user, role=Role.OWNER)
    timed = Timed()
    with ResponsesServer() as server:
        settings.WORKER_AGENT_EGRESS = [str(url_destination(server.base_url))]
        homes = []
        for name in "abc":
            home = work / f"home-{label}-{name}"
            home.mkdir(parents=True)
            (home / "config.toml").write_text(config_toml(server.base_url))
            homes.append(home)
        answer = "Looked at the login code; the session cookie was not renewed. " * 20
        server.script(*[Reply(items=(message(f"Turn {t}: {answer}"),)) for t in range(turns)])
        task = Task.objects.create(project=project, user=user, prompt="Fix the login bug")
        print(
            f"  {'turn':>4} {'files KB':>9} {'stored KB':>10} {'ratio':>6} "
            f"{'store ms':>9} {'restore ms':>11}"
        )
        for turn in range(1, turns + 1):
            if turn > 1:
                Task.objects.filter(pk=task.pk).update(
                    status=TaskStatus.QUEUED, turn=turn, continuation_prompt=f"Now step {turn}"
                )
            # each turn on the next host: its codex configuration and its task rooms
            host = homes[(turn - 1) % len(homes)]
            os.environ["CODEX_HOME"] = str(host)
            settings.WORKER_TASK_ROOT = str(host / "tasks")
            Worker(
                executor=CodexExecutor(),
                worker_id=f"bench-{turn % 3}",
                heartbeat_seconds=0,
                poll_interval=0,
            ).run_once()
            task.refresh_from_db()
            if task.status != TaskStatus.COMPLETED:
                raise SystemExit(f"turn {turn} failed: {task.failure_reason}")
            record = CodexSession.objects.get(thread_id=task.thread_id)
            restore = timed.seconds("restore", turn)
            home = host / "tasks" / f"task-{task.pk}" / "home" / ".codex"
            files = sum(
                p.stat().st_size for p in session_files(thread_id=task.thread_id, home=home)
            )
            print(
                f"  {turn:>4} {files / 1024:>9.1f} {record.stored_size / 1024:>10.1f} "
                f"{files / record.stored_size:>6.1f} "
                f"{timed.seconds('store', turn) * 1000:>9.1f} "
                f"{(restore * 1000) if restore is not None else float('nan'):>11.1f}"
            )


def synthetic_rollout(path: Path, megabytes: int) -> None:
    """JSON lines like the CLI's: messages, and tool output of source-like text."""
    rng = random.Random(megabytes)
    words = [
        "def",
        "return",
        "self",
        "session",
        "login",
        "import",
        "cookie",
        "user",
        "if",
        "None",
        "request",
        "response",
        "token",
        "expires",
        "for",
        "in",
        "raise",
        "class",
        "test",
        "x",
    ] + [f"name_{i}" for i in range(400)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        written = 0
        while written < megabytes * 2**20:
            lines = "\n".join(
                " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(40)
            )
            event = {
                "timestamp": "2026-12-01T14:26:57.000Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": f"call_{written}",
                    "output": json.dumps({"output": lines, "exit_code": 0}),
                },
            }
            text = json.dumps(event) + "\n"
            out.write(text)
            written += len(text)


def synthetic(*, work: Path) -> None:
    from django.contrib.auth import get_user_model

    from controlplane.models import Membership, Project, Role, Task, TaskStatus
    from worker.codex.session_store import SessionStore
    from worker.executors.base import RunHolder
    from worker.models import CodexSession

    user = get_user_model().objects.create_user(
        username=f"bench-synthetic-{os.getpid()}-{time.monotonic_ns()}"
    )
    project = Project.objects.create(name="bench synthetic", created_by=user)
    Membership.objects.create(project=project, user=user, role=Role.OWNER)
    task = Task.objects.create(
        project=project, user=user, prompt="x", status=TaskStatus.RUNNING, worker_id="bench"
    )
    store = SessionStore(RunHolder(task_id=task.pk, worker_id="bench", turn=1))
    print(f"  {'files MB':>8} {'stored MB':>10} {'ratio':>6} {'store ms':>9} {'restore ms':>11}")
    for megabytes in SYNTHETIC_MB:
        home = work / f"synthetic-{megabytes}"
        synthetic_rollout(
            home / "sessions/2026/12/01" / f"rollout-2026-12-01T14-26-57-{THREAD}.jsonl", megabytes
        )
        stores, restores = [], []
        for _ in range(REPEATS):
            CodexSession.objects.filter(thread_id=THREAD).delete()
            started = time.perf_counter()
            store.store(thread_id=THREAD, home=home)
            stores.append(time.perf_counter() - started)
            target = work / "restore-target"
            shutil.rmtree(target, ignore_errors=True)
            started = time.perf_counter()
            outcome = store.restore(thread_id=THREAD, home=target)
            restores.append(time.perf_counter() - started)
            assert outcome == "restored", outcome
        record = CodexSession.objects.get(thread_id=THREAD)
        files = megabytes * 2**20
        print(
            f"  {files / 2**20:>8.1f} {record.stored_size / 2**20:>10.2f} "
            f"{files / record.stored_size:>6.1f} "
            f"{statistics.median(stores) * 1000:>9.0f} {statistics.median(restores) * 1000:>11.0f}"
        )
        CodexSession.objects.filter(thread_id=THREAD).delete()
        shutil.rmtree(home)


def use_s3(work: Path):
    """Start moto's server, make a bucket, point WORKER_CODEX_SESSION_STORAGE at it."""
    import boto3
    from django.conf import settings
    from django.core.files.storage import storages

    from controlplane.settings import object_storage_settings
    from tests.worker.s3_server import S3Server

    server = S3Server(work / "s3.log").__enter__()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ[name] = value
    boto3.client("s3", endpoint_url=server.endpoint_url).create_bucket(Bucket="bench")
    url = f"s3://bench/codex?endpoint_url={server.endpoint_url}&region_name=us-east-1"
    settings.WORKER_CODEX_SESSION_STORAGE = url
    settings.STORAGES = {**settings.STORAGES, "codex_sessions": object_storage_settings(url)}
    storages._backends = None
    storages._storages = {}
    return server


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--s3", action="store_true", help="also in a local S3 server (moto)")
    args = parser.parse_args()
    with harness.run(args) as bench:
        work = Path(tempfile.mkdtemp(prefix="bench-codex-sessions-"))
        s3 = None
        try:
            backends = [f"database ({bench.vendor})"] + (
                ["object storage (moto S3)"] if args.s3 else []
            )
            for backend in backends:
                if backend.startswith("object"):
                    s3 = use_s3(work)
                print(f"{backend}: real codex CLI, {args.turns} turns on 3 CODEX_HOMEs")
                real_cli_turns(turns=args.turns, label=backend.split()[0], work=work)
                print(f"{backend}: synthetic rollout files, median of {REPEATS}")
                synthetic(work=work)
        finally:
            if s3 is not None:
                s3.__exit__()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
