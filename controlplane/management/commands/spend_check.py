"""`manage.py spend_check [--fix] [--user USERNAME]`: monthly spend totals and task costs
against the usage ledger."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.services.usage import monthly_spend_verify, task_cost_verify


class Command(BaseCommand):
    help = (
        "Recompute each user's monthly spend and each task's cost from the usage ledger and "
        "report what drifted; --fix rewrites it. Exits 1 when drift is found and not fixed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="Rewrite drifted totals.")
        parser.add_argument("--user", metavar="USERNAME", help="Check one user only.")

    def handle(self, *args, fix: bool, user: str | None, **options):
        user_id = None
        if user is not None:
            found = get_user_model().objects.filter(username=user).first()
            if found is None:
                raise CommandError(f"No user {user!r}.")
            user_id = found.pk
        drifts = [
            *monthly_spend_verify(fix=fix, user_id=user_id),
            *task_cost_verify(fix=fix, user_id=user_id),
        ]
        for drift in drifts:
            self.stdout.write(f"drift: {drift}")
        if not drifts:
            self.stdout.write("Monthly spend and task costs match the usage ledger.")
        elif fix:
            self.stdout.write(f"Fixed {len(drifts)} total(s) from the ledger.")
        else:
            raise CommandError(
                f"{len(drifts)} total(s) differ from the ledger; run with --fix.", returncode=1
            )
