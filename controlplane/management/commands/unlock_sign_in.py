"""`manage.py unlock_sign_in USERNAME... [--address IP...]`: lift django-axes' sign-in locks."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.services.sign_in_locks import sign_in_unlock


class Command(BaseCommand):
    help = (
        "Lift the failed-sign-in lock of users (and of the addresses that locked them) or of "
        "client addresses, before the cool-off ends."
    )

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="*", help="users to unlock")
        parser.add_argument(
            "--address", action="append", default=[], help="a client address to unlock"
        )

    def handle(self, *args, usernames: list[str], address: list[str], **options):
        if not usernames and not address:
            raise CommandError("Name at least one username or --address.")
        for username in usernames:
            cleared = sign_in_unlock(actor="manage.py unlock_sign_in", username=username)
            self.stdout.write(f"{username}: {'unlocked' if cleared else 'was not locked'}")
        if address:
            cleared = sign_in_unlock(actor="manage.py unlock_sign_in", addresses=address)
            self.stdout.write(
                f"{', '.join(address)}: {'unlocked' if cleared else 'was not locked'}"
            )
