"""`manage.py memory_mcp`: the `memory` MCP server over stdio, for one running turn.

The agent's MCP client starts it with the turn's task key in `CONTROLPLANE_MEMORY_TOKEN`
(the worker's executors arrange that; docs/memory-tools.md). Its stdout is the protocol:
logs go to stderr.
"""

from django.core.management.base import BaseCommand

from automemory.mcp_server import memory_server


class Command(BaseCommand):
    help = "Serve the memory tools (MCP, stdio) to a running task's agent."

    def handle(self, *args, **options):
        memory_server().run("stdio")
