"""`manage.py token USERNAME --create NAME [--expires-days N] | --list | --revoke ID`."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from controlplane.errors import DomainError
from controlplane.limits import text_problem
from controlplane.services.tokens import (
    token_create,
    token_get_for_user,
    token_list,
    token_revoke,
)


class Command(BaseCommand):
    help = (
        "Manage a user's API tokens: --create NAME mints one and prints its key as the last line "
        "(shown once: only its hash is stored); --list shows them without keys; --revoke ID "
        "revokes one."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--create", metavar="NAME", help="Mint a token with this name.")
        action.add_argument("--list", action="store_true", help="List the user's tokens.")
        action.add_argument("--revoke", metavar="ID", help="Revoke the user's token with this id.")
        parser.add_argument(
            "--expires-days",
            type=int,
            metavar="N",
            help="With --create: the token expires after N days (default: never).",
        )

    def handle(self, *args, username: str, **options):
        user = None
        if not text_problem(username):
            user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        if options["expires_days"] is not None and options["create"] is None:
            raise CommandError("--expires-days goes with --create.")
        if options["create"] is not None:
            self._create(user, options["create"], options["expires_days"])
        elif options["list"]:
            self._list(user)
        else:
            self._revoke(user, options["revoke"])

    def _create(self, user, name: str, expires_days: int | None) -> None:
        try:
            minted = token_create(user=user, name=name, expires_in_days=expires_days)
        except DomainError as exc:
            raise CommandError(f"{exc.field or 'token'}: {exc.message}") from None
        expires = minted.token.expires_at.isoformat() if minted.token.expires_at else "never"
        self.stdout.write(
            f"Token {minted.token.name!r} (id {minted.token.pk}, prefix {minted.token.prefix}) "
            f"for {user.username}, expires {expires}. Shown once:"
        )
        self.stdout.write(minted.key)

    def _list(self, user) -> None:
        now = timezone.now()
        tokens = list(token_list(user=user))
        if not tokens:
            self.stdout.write(f"{user.username} has no API tokens.")
            return
        self.stdout.write("id\tname\tprefix\tcreated\texpires\tlast used\tstate")
        for token in tokens:
            if token.revoked_at:
                state = f"revoked {_when(token.revoked_at)}"
            else:
                state = "expired" if token.expires_at and token.expires_at <= now else "active"
            self.stdout.write(
                "\t".join(
                    [
                        str(token.pk),
                        token.name,
                        token.prefix,
                        _when(token.created_at),
                        _when(token.expires_at, "never"),
                        _when(token.last_used_at, "never"),
                        state,
                    ]
                )
            )

    def _revoke(self, user, token_id: str) -> None:
        token = token_get_for_user(user=user, token_id=token_id)
        if token is None:
            raise CommandError(f"{user.username} has no token with id {token_id!r}.")
        already = token.revoked_at is not None
        token_revoke(token=token)
        if already:
            self.stdout.write(f"Token {token.pk} ({token.name!r}) was already revoked.")
        else:
            self.stdout.write(f"Revoked token {token.pk} ({token.name!r}) of {user.username}.")


def _when(moment, missing: str = "-") -> str:
    return moment.isoformat(timespec="seconds") if moment else missing
