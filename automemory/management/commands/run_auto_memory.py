"""`manage.py run_auto_memory --user USERNAME [--force]`: one user's extraction sweep, now."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from automemory.services.extractor import process_auto_memories


class Command(BaseCommand):
    help = "Run the auto memory extraction sweep over one user's tasks and print the summary."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="Username whose tasks to sweep.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Skip the idle, duration and length gates (never the switch, "
            "external-context or quota gates).",
        )

    def handle(self, *args, user: str, force: bool, **options):
        found = get_user_model().objects.filter(username=user).first()
        if found is None:
            raise CommandError(f"No user named {user!r}.")
        summary = process_auto_memories(user=found, force=force)
        self.stdout.write(json.dumps(summary.as_dict(), indent=2, sort_keys=True))
