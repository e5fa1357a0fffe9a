"""`manage.py codex_sessions_prune`: retention of codex session records."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from worker.codex.session_store import session_records_prune


class Command(BaseCommand):
    help = (
        "Delete codex session records not updated for --idle-days days (their tasks then "
        "resume only on a worker that still has the thread), and objects in object storage no "
        "row names (those of deleted tasks). Run it daily, e.g. from cron."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--idle-days",
            type=int,
            default=None,
            help="Delete the session records of threads idle this many days (default: keep all).",
        )
        parser.add_argument(
            "--no-orphans", action="store_true", help="Leave unnamed objects in object storage."
        )
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")

    def handle(self, *args, idle_days=None, no_orphans=False, dry_run=False, **options):
        if idle_days is not None and idle_days < 1:
            raise CommandError("--idle-days must be at least 1")
        now = timezone.now()
        report = session_records_prune(
            idle_before=now - timedelta(days=idle_days) if idle_days is not None else None,
            orphans=not no_orphans,
            dry_run=dry_run,
            now=now,
        )
        verb = "would delete" if dry_run else "deleted"
        self.stdout.write(
            f"codex session records: {verb} {report.records_deleted} records and "
            f"{report.objects_deleted} objects"
        )
