"""`manage.py run_worker`: a thin command over `worker.loop.Worker`."""

import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from worker import sandbox
from worker.code_signature import EXIT_CODE_CHANGED
from worker.executors import EXECUTORS, UnknownExecutor, executor_get
from worker.loop import ROLES, Worker
from worker.metrics_server import MetricsServer

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Claim queued tasks and run them with an executor. The first SIGINT/SIGTERM lets the "
        "task in hand finish, the second re-queues it as a resume and exits at once. Exits 75 "
        "when its code changed on disk (WORKER_CODE_CHECK_SECONDS): start it again."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--once",
            action="store_true",
            help="Process every task queued now, run one memory sweep, exit.",
        )
        parser.add_argument(
            "--role",
            choices=ROLES,
            default="all",
            help="all: run tasks, and sweep memories from a background thread under the "
            "sweep lease (one worker of many sweeps at a time); tasks: run tasks only; "
            "sweeper: sweep only (default: all).",
        )
        parser.add_argument(
            "--executor",
            default=None,
            help=f"One of {', '.join(sorted(EXECUTORS))} (default: WORKER_EXECUTOR, else echo).",
        )
        parser.add_argument("--worker-id", default=None, help="Default: <hostname>-<pid>-<random>.")
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=None,
            help="Seconds to wait after a round that found nothing "
            "(default: WORKER_POLL_INTERVAL_SECONDS).",
        )

    def handle(
        self,
        *args,
        once=False,
        executor=None,
        worker_id=None,
        poll_interval=None,
        role="all",
        **options,
    ):
        if poll_interval is not None and poll_interval < 0:
            raise CommandError("--poll-interval must be >= 0")
        try:
            chosen = executor_get(name=executor or settings.WORKER_EXECUTOR or "echo")
        except UnknownExecutor as exc:
            raise CommandError(str(exc)) from None
        if getattr(chosen, "runs_agents", False) and role != "sweeper":
            try:
                logger.info("agents run with WORKER_SANDBOX=%s", sandbox.sandbox_mode())
            except sandbox.SandboxUnavailable as exc:
                raise CommandError(f"WORKER_SANDBOX=bwrap, but {exc}") from None
        worker = Worker(
            executor=chosen, worker_id=worker_id, poll_interval=poll_interval, role=role
        )
        metrics = None
        if settings.WORKER_METRICS_PORT:
            metrics = MetricsServer(
                port=settings.WORKER_METRICS_PORT, addr=settings.WORKER_METRICS_ADDR
            )
            try:
                metrics.start()
            except OSError as exc:
                raise CommandError(
                    f"cannot serve metrics on {settings.WORKER_METRICS_ADDR}:"
                    f"{settings.WORKER_METRICS_PORT}: {exc}"
                ) from None
        worker.install_signal_handlers()
        try:
            if once:
                worker.run_once()
            else:
                worker.run_forever()
        finally:
            if metrics is not None:
                metrics.stop()
        if worker.aborting:
            raise SystemExit(1)
        if worker.code_changed is not None:
            raise SystemExit(EXIT_CODE_CHANGED)  # its code was replaced: restart me
