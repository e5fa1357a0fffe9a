"""`manage.py run_with_local_model`: `run_main` with the local memory model beside it.

Starts the llama.cpp server of `automemory.local_model` (weights and runtime from `make
model`) on 127.0.0.1, points auto memory at it (`AUTOMEMORY_OPENAI_BASE_URL` and the slow
model's timeout and lease, unless set already), turns model extraction and consolidation on
for the demo user, then runs `run_main`; the model server stops when it does.
"""

import json
import os

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from automemory import conf
from automemory.local_model import MODEL_NAME, LocalModelServer, local_model_missing
from automemory.services.preferences import settings_update
from controlplane.services.demo import demo_setup

# A 1.5B model on 2 cores takes 20-60 s a call: one call may take 2 minutes, not retried,
# and the sweep lease outlasts a task's four calls twice over.
LOCAL_MODEL_ENV = {
    "AUTOMEMORY_MODEL_TIMEOUT_SECONDS": "120",
    "AUTOMEMORY_MODEL_MAX_RETRIES": "0",
    "AUTOMEMORY_SWEEP_LEASE_SECONDS": "1200",
}


class Command(BaseCommand):
    help = (
        "Run the API and a worker (run_main) with the local memory model (make model) on "
        "127.0.0.1, model extraction and consolidation on for the demo user."
    )

    def add_arguments(self, parser):
        parser.add_argument("--addrport", default="127.0.0.1:8000", help="as run_main's")
        parser.add_argument(
            "--model-port", type=int, default=8081, help="the model server's port (0: any free)"
        )

    def handle(self, *args, addrport: str, model_port: int, **options):
        problem = local_model_missing()
        if problem:
            raise CommandError(problem)
        log_path = settings.VAR_DIR / "local-model.log"
        self.stdout.write(f"Starting the local memory model ({MODEL_NAME}); log: {log_path}")
        server = LocalModelServer(port=model_port, log_path=log_path)
        try:
            server.start()
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        try:
            os.environ["AUTOMEMORY_OPENAI_BASE_URL"] = server.base_url
            for name, value in LOCAL_MODEL_ENV.items():
                os.environ.setdefault(name, value)
            # The local model's calls cost nothing; other models keep their prices.
            prices = {**conf.get("MODEL_PRICES"), MODEL_NAME: {"input": "0", "output": "0"}}
            os.environ.setdefault("AUTOMEMORY_MODEL_PRICES", json.dumps(prices))
            demo = demo_setup()
            settings_update(
                user=demo.user,
                changes={"extract_model": MODEL_NAME, "consolidation_model": MODEL_NAME},
            )
            self.stdout.write(f"Memory model: {server.base_url} (demo user: {MODEL_NAME})")
            call_command("run_main", addrport=addrport)
        finally:
            server.stop()
