"""`manage.py run_main`: the API server (gunicorn) and one worker together, for `make run`.

It collects the static files (whitenoise serves them from STATIC_ROOT), listens on
`--addrport` itself, so it can print the address it really serves (port 0 picks a free one)
and stop early when the address is taken, and hands the socket to gunicorn. Unless
PROMETHEUS_MULTIPROC_DIR is set, it gives both children a new temporary directory for it
(removed at exit), so `/metrics` (with METRICS_ENABLED) adds up every process's counters.
Ctrl-C (SIGINT) or SIGTERM is passed on to both children; when either exits the other is
stopped too, and the command exits with the first one's exit code, except a worker exiting
75 (its code changed on disk, docs/worker.md): that one is started again on the new code.
"""

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from controlplane.addrport import addrport_parse, local_url, server_url
from controlplane.services.demo import demo_setup
from controlplane.supervisor import Supervisor

# Enough for one person trying it on a laptop: two processes of four threads each.
WEB_WORKERS = 2
WEB_THREADS = 4


def listener_open(*, host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port that child processes can inherit."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc}") from None
    return listener


class Command(BaseCommand):
    help = (
        "Serve the API with gunicorn beside a worker until Ctrl-C or until one of them exits. "
        "Runs collectstatic first."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--addrport",
            default="127.0.0.1:8000",
            help="PORT or HOST:PORT to serve on (port 0: any free port).",
        )
        parser.add_argument("--no-worker", action="store_true", help="Run only the API server.")

    def handle(self, *args, addrport: str, no_worker: bool, **options):
        host, port = addrport_parse(addrport)
        listener = listener_open(host=host, port=port)
        call_command("collectstatic", interactive=False, verbosity=0)
        if not os.environ.get("CACHE_URL"):
            # Both API processes must see the same sign-in locks and throttle counters: a
            # file cache under var/ (private, as var/ is) unless CACHE_URL names another.
            cache_dir = Path(settings.VAR_DIR) / "cache"
            cache_dir.mkdir(mode=0o700, exist_ok=True)
            os.environ["CACHE_URL"] = f"filecache://{cache_dir}"
        url = server_url(*listener.getsockname()[:2])
        # The worker's agents reach the memory tools at the address really served.
        os.environ["WORKER_MEMORY_API_URL"] = local_url(*listener.getsockname()[:2])
        metrics_dir = None
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # A new empty directory (as prometheus_client requires) the children inherit:
            # /metrics then adds up both API processes and the worker. Removed at exit.
            metrics_dir = tempfile.mkdtemp(prefix="controlplane-metrics-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        demo = demo_setup()
        commands = {
            "api": [
                sys.executable,
                "-m",
                "gunicorn",
                "controlplane.wsgi",
                "--bind",
                f"fd://{listener.fileno()}",
                "--workers",
                str(WEB_WORKERS),
                "--threads",
                str(WEB_THREADS),
            ]
        }
        if not no_worker:
            manage = str(settings.BASE_DIR / "manage.py")
            commands["worker"] = [sys.executable, manage, "run_worker"]
        self.stdout.write(f"API:        {url}/  (interactive page: /api/docs)")
        self.stdout.write(f"Console:    {url}/console/  (memories, settings, extraction log)")
        self.stdout.write(f"Admin:      {url}/admin/")
        self.stdout.write(f"Demo user:  {demo.user.username}  password: {demo.password}")
        self.stdout.write(f"Demo token: {demo.token}")
        self.stdout.write("Press Ctrl-C to stop.")
        self.stdout.flush()
        try:
            code = Supervisor(
                commands, pass_fds={"api": [listener.fileno()]}, restartable={"worker"}
            ).run()
        finally:
            listener.close()
            if metrics_dir is not None:
                shutil.rmtree(metrics_dir, ignore_errors=True)
        if code:
            sys.exit(code)
