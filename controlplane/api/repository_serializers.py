"""Input and output shapes of a project's repository and a task's changes."""

from rest_framework import serializers

from controlplane.api.common import RejectUnknownFieldsMixin
from controlplane.api.serializers import BranchField, StrictTextField
from controlplane.models import REPOSITORY_SHOWN_FIELDS, Repository
from controlplane.repository_urls import URL_MAX_CHARS
from controlplane.services.repositories import CREDENTIAL_MAX_CHARS


class RepositoryInput(RejectUnknownFieldsMixin, serializers.Serializer):
    url = StrictTextField(
        max_length=URL_MAX_CHARS,
        help_text="https://HOST/PATH, ssh://[USER@]HOST/PATH, USER@HOST:PATH, or file:///PATH "
        "inside a folder of REPOSITORY_FILE_ROOTS. No password in it: use `credential`.",
    )
    default_branch = BranchField(default="main")
    credential = StrictTextField(
        max_length=CREDENTIAL_MAX_CHARS,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        write_only=True,
        help_text="A token (https; the user name comes from the URL, else x-access-token) or "
        "a private key (ssh). Stored encrypted, never returned. Absent: the stored one is kept "
        "while the URL stays the same; null removes it.",
    )


class RepositoryOutput(serializers.ModelSerializer):
    project_id = serializers.IntegerField(read_only=True)
    credential_set = serializers.BooleanField(
        read_only=True, help_text="Whether a credential is stored (it is never shown)."
    )
    remote_status = serializers.ChoiceField(
        choices=["unchecked", "reachable", "unreachable"],
        read_only=True,
        help_text="What the latest fetch by a worker found: `unchecked` before any.",
    )
    last_error = serializers.CharField(
        read_only=True, help_text="Why the latest fetch failed; empty when it did not."
    )

    class Meta:
        model = Repository
        fields = ["project_id", *REPOSITORY_SHOWN_FIELDS, "created_at", "updated_at"]
        read_only_fields = fields
