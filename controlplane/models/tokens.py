"""API tokens."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

# What the API and the admin show of a token: never its key's hash.
API_TOKEN_SHOWN_FIELDS = (
    "name",
    "prefix",
    "created_at",
    "expires_at",
    "last_used_at",
    "revoked_at",
)


class ApiToken(models.Model):
    """An API token: only the SHA-256 of its key is stored; the key is shown once, at creation.

    A user may hold several, each named, optionally expiring, revocable (the row stays, with
    `revoked_at` set) and stamped with when it was last used (written at most once a minute).
    `prefix` is the key's first characters, enough to tell tokens apart, never enough to use.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="api_token_user_idx")]
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="api_token_name_not_blank"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
