"""`manage.py auto_memory_settings USERNAME [--set FIELD=VALUE ...]`: see or change settings.

Prints the user's settings as JSON. `--set` changes go through the same validation and service
as the API (`PATCH /users/me/auto-memory-settings`), so the next sweep looks again at the
tasks the old settings skipped. A value is read as JSON when it parses (`true`, `0`, `null`,
`["srv"]`), else as a string; one bad value changes nothing.
"""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from automemory.api.serializers import AutoMemorySettingsSerializer
from automemory.services.preferences import SETTINGS_FIELDS, settings_get, settings_update


def _parse_assignment(text: str) -> tuple[str, object]:
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise CommandError(f"--set expects FIELD=VALUE, not {text!r}.")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


class Command(BaseCommand):
    help = "Show a user's auto memory settings as JSON, or change them with --set FIELD=VALUE."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            dest="assignments",
            help=f"Change a setting (repeatable). Fields: {', '.join(SETTINGS_FIELDS)}.",
        )

    def handle(self, *args, username: str, assignments: list[str], **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if assignments:
            changes = dict(_parse_assignment(text) for text in assignments)
            serializer = AutoMemorySettingsSerializer(data=changes, partial=True)
            if not serializer.is_valid():
                raise CommandError(json.dumps(serializer.errors, sort_keys=True))
            settings = settings_update(user=user, changes=dict(serializer.validated_data))
        else:
            settings = settings_get(user_id=user.pk)
        body = {name: getattr(settings, name) for name in SETTINGS_FIELDS}
        body["username"] = user.username
        body["updated_at"] = settings.updated_at.isoformat() if settings.updated_at else None
        self.stdout.write(json.dumps(body, indent=2, sort_keys=True, default=str))
