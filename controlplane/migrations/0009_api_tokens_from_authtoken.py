"""Existing DRF tokens become hashed API tokens named "migrated", so their keys keep working.

Each `authtoken` key is stored as its SHA-256 (with its first 8 characters as the visible
prefix) and the plain-text row is deleted. Not reversible: only the hashes remain.
"""

import hashlib

from django.db import migrations

MIGRATED_TOKEN_NAME = "migrated"
PREFIX_CHARS = 8


def authtoken_keys_hash(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("controlplane", "ApiToken")
    db = schema_editor.connection.alias
    tokens = list(Token.objects.using(db).all())
    ApiToken.objects.using(db).bulk_create(
        ApiToken(
            user_id=token.user_id,
            name=MIGRATED_TOKEN_NAME,
            prefix=token.key[:PREFIX_CHARS],
            key_hash=hashlib.sha256(token.key.encode()).hexdigest(),
            created_at=token.created,
        )
        for token in tokens
    )
    Token.objects.using(db).filter(pk__in=[token.pk for token in tokens]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0008_api_tokens"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [
        migrations.RunPython(authtoken_keys_hash, migrations.RunPython.noop, elidable=True),
    ]
