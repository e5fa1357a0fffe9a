"""`manage.py run_main`: the API server and one worker together, for `make run`.

Ctrl-C (SIGINT) or SIGTERM is passed on to both; when either process exits the other is
stopped too, and the command exits with the first one's exit code.
"""

import sys

from django.core.management.base import BaseCommand

from controlplane.services.demo import demo_setup
from controlplane.supervisor import Supervisor


class Command(BaseCommand):
    help = "Run the API server and a worker side by side until Ctrl-C or until one of them exits."

    def add_arguments(self, parser):
        parser.add_argument("--addrport", default="127.0.0.1:8000")
        parser.add_argument("--no-worker", action="store_true", help="Run only the API server.")

    def handle(self, *args, addrport: str, no_worker: bool, **options):
        demo = demo_setup()
        manage = [sys.executable, "manage.py"]
        commands = {"api": [*manage, "runserver", addrport, "--noreload"]}
        if not no_worker:
            commands["worker"] = [*manage, "run_worker"]
        self.stdout.write(f"API:        http://{addrport}/  (interactive page: /api/docs)")
        self.stdout.write(f"Admin:      http://{addrport}/admin/  (demo / demo)")
        self.stdout.write(f"Demo token: {demo.token}")
        self.stdout.write("Press Ctrl-C to stop.")
        self.stdout.flush()
        code = Supervisor(commands).run()
        if code:
            sys.exit(code)
