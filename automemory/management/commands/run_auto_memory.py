"""`manage.py run_auto_memory --user USERNAME [--force] [--archive-unused]`: one user's
extraction sweep, now (and, with `--archive-unused`, their retention pass)."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from automemory.services.extraction.sweep import SweepBusy, process_auto_memories
from automemory.services.retention import memories_archive_unused


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
        parser.add_argument(
            "--archive-unused",
            action="store_true",
            help="Afterwards, archive the user's auto memories unused for their "
            "max_unused_days (nothing when it is 0) and print that summary too.",
        )

    def handle(self, *args, user: str, force: bool, archive_unused: bool = False, **options):
        found = get_user_model().objects.filter(username=user).first()
        if found is None:
            raise CommandError(f"No user named {user!r}.")
        try:
            output = process_auto_memories(user=found, force=force).as_dict()
        except SweepBusy as busy:
            raise CommandError(str(busy)) from None
        if archive_unused:
            output["retention"] = memories_archive_unused(now=timezone.now(), user=found).as_dict()
        self.stdout.write(json.dumps(output, indent=2, sort_keys=True))
