"""`manage.py memory_mcp`: the `memory` MCP server over stdio (automemory/memory_relay.py).

A convenience: it replaces itself with the relay, which reaches the memory tools at
`CONTROLPLANE_MEMORY_URL` under the task key in `CONTROLPLANE_MEMORY_TOKEN` and needs
nothing of Django. Agents are given the relay's own command line
(`WORKER_MEMORY_MCP_COMMAND`); see docs/memory-tools.md.
"""

import os
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

RELAY = Path(__file__).resolve().parents[2] / "memory_relay.py"


class Command(BaseCommand):
    help = "Serve the memory tools (MCP, stdio) to a running task's agent: exec the relay."

    def handle(self, *args, **options):
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, str(RELAY)])
