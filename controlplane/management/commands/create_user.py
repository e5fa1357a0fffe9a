"""`manage.py create_user USERNAME [--staff]`: create or find a user; print its API token last."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.errors import DomainError
from controlplane.services.users import token_get_or_create, user_get_or_create


class Command(BaseCommand):
    help = "Create a user (or find an existing one) and print its API token as the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--staff", action="store_true", help="Make the user staff.")

    def handle(self, *args, username: str, staff: bool, **options):
        try:
            user, created = user_get_or_create(username=username, is_staff=staff)
        except DomainError as exc:
            raise CommandError(f"Invalid username: {exc.message}") from None
        state = "Created" if created else "Found"
        self.stdout.write(f"{state} user {user.username}{' (staff)' if user.is_staff else ''}.")
        self.stdout.write(token_get_or_create(user=user))
