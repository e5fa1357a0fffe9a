"""`manage.py create_user USERNAME [--staff]`: create or find a user; print a new API token last."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.errors import DomainError
from controlplane.services.tokens import token_create
from controlplane.services.users import user_get_or_create

CLI_TOKEN_NAME = "cli"


class Command(BaseCommand):
    help = (
        "Create a user (or find an existing one), mint a new API token named 'cli' for it and "
        "print the token as the last line. Only the token's hash is stored: it is shown once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--staff", action="store_true", help="Make the user staff.")

    def handle(self, *args, username: str, staff: bool, **options):
        try:
            with transaction.atomic():
                user, created = user_get_or_create(username=username, is_staff=staff)
                minted = token_create(user=user, name=CLI_TOKEN_NAME)
        except DomainError as exc:
            raise CommandError(f"Invalid username: {exc.message}") from None
        state = "Created" if created else "Found"
        self.stdout.write(f"{state} user {user.username}{' (staff)' if user.is_staff else ''}.")
        self.stdout.write(f"New API token {CLI_TOKEN_NAME!r} (id {minted.token.pk}), shown once:")
        self.stdout.write(minted.key)
