"""`manage.py repository_credentials_rotate`: re-encrypt every stored repository credential
under the first key of REPOSITORY_CREDENTIAL_KEYS (then the older keys can be dropped)."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.credentials import CredentialUnreadable, credential_rotated
from controlplane.models import Repository


class Command(BaseCommand):
    help = (
        "Re-encrypt every repository credential with the first REPOSITORY_CREDENTIAL_KEYS key. "
        "Run it after putting a new key first; then the old keys may be removed."
    )

    def handle(self, *args, **options):
        rotated, unreadable = 0, []
        with transaction.atomic():
            rows = Repository.objects.select_for_update().exclude(credential_ciphertext="")
            for repository in rows:
                try:
                    repository.credential_ciphertext = credential_rotated(
                        repository.credential_ciphertext
                    )
                except CredentialUnreadable:
                    unreadable.append(repository.project_id)
                    continue
                repository.save(update_fields=["credential_ciphertext"])
                rotated += 1
        self.stdout.write(f"{rotated} credentials re-encrypted with the first key.")
        if unreadable:
            raise CommandError(
                "No configured key decrypts the credential of projects "
                + ", ".join(str(pk) for pk in unreadable)
                + ": set them again with PUT /projects/{id}/repository."
            )
