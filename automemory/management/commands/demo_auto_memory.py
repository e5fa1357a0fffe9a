"""`manage.py demo_auto_memory`: show the auto memory loop on the demo project."""

from django.core.management.base import BaseCommand

from automemory.services.demo import demo_loop_run
from controlplane.addrport import addrport_parse, server_url


class Command(BaseCommand):
    help = (
        "Turn auto memory on for the demo user, run two tasks with the echo worker, extract a "
        "memory, and run a new task that receives it. Does nothing new if it already ran."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--addrport",
            default="127.0.0.1:8000",
            help="PORT or HOST:PORT the API is served on (`run_main --addrport`), for the URLs.",
        )

    def handle(self, *args, addrport: str, **options):
        base = server_url(*addrport_parse(addrport))
        loop = demo_loop_run()
        say = self.stdout.write
        auth = f'-H "Authorization: Token {loop.token}"'
        if loop.already_done:
            say(f"Auto memory demo: already ran ({len(loop.memories)} auto memories stored).")
        else:
            say("Auto memory demo")
            for task in loop.first_tasks:
                say(f"  ran task {task.pk}: {task.prompt.splitlines()[0]!r}")
            for row in loop.log:
                say(f"  extraction log, task {row.task_id}: {row.outcome} ({row.reason})")
            for memory in loop.memories:
                say(f"  memory {memory.pk} (project level, from task {memory.source_task_id}):")
                for line in memory.content.splitlines():
                    say(f"    | {line}")
            task = loop.next_task
            say(
                f"  new task {task.pk} {task.prompt!r} received memories {task.injected_memory_ids}"
            )
            say("  what its agent was given (echo executor's result):")
            for line in task.result_text.splitlines():
                say(f"    | {line}")
        say(f"See it in the console: {base}/console/log (sign in as the demo user)")
        say("See each step:")
        say(f"  curl {auth} {base}/users/me/auto-memory-settings")
        say(f"  curl {auth} {base}/users/me/auto-memory-log")
        say(f"  curl {auth} {base}/projects/{loop.project_id}/memories")
        if loop.next_task is not None:
            say(f"  curl {auth} {base}/tasks/{loop.next_task.pk}")
        say(f"  admin: {base}/admin/automemory/ and {base}/admin/controlplane/identitymemory/")
