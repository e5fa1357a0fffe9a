"""Repository credentials encrypted at rest: Fernet (AES-128-CBC and HMAC-SHA256, from
`cryptography`) under the keys of `REPOSITORY_CREDENTIAL_KEYS`.

The first key encrypts; every key decrypts (MultiFernet), so a key is rotated by putting a
new one first and re-encrypting the stored credentials with it
(`manage.py repository_credentials_rotate`), then dropping the old one. Without configured
keys one key is derived from SECRET_KEY (HKDF-SHA256), so a development setup works as it
is; a deployment sets its own keys, since rotating SECRET_KEY would then lose the
credentials.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DERIVED_KEY_INFO = b"controlplane repository credentials"


class CredentialUnreadable(Exception):
    """A stored credential none of the configured keys decrypts."""


def _derived_key(secret_key: str) -> bytes:
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=DERIVED_KEY_INFO).derive(
        secret_key.encode()
    )
    return base64.urlsafe_b64encode(raw)


@functools.lru_cache(maxsize=4)
def _fernet_for(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        return MultiFernet([Fernet(_derived_key(secret_key))])
    fernets = []
    for number, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key.strip().encode()))
        except (ValueError, TypeError):
            raise ImproperlyConfigured(
                f"REPOSITORY_CREDENTIAL_KEYS: key {number} is not a Fernet key (urlsafe "
                "base64 of 32 bytes; make one with `python -c 'from cryptography.fernet "
                "import Fernet; print(Fernet.generate_key().decode())'`)"
            ) from None
    return MultiFernet(fernets)


def _fernet() -> MultiFernet:
    keys = tuple(key for key in settings.REPOSITORY_CREDENTIAL_KEYS if key.strip())
    return _fernet_for(keys, settings.SECRET_KEY)


def credential_keys_problem() -> str:
    """Why the configured keys cannot be used ("" when they can): a system check says it."""
    try:
        _fernet()
    except ImproperlyConfigured as exc:
        return str(exc)
    return ""


def credential_encrypt(plaintext: str) -> str:
    """The stored form of a credential: a Fernet token under the first key."""
    return _fernet().encrypt(plaintext.encode()).decode()


def credential_decrypt(ciphertext: str) -> str:
    """The credential a stored token holds; CredentialUnreadable when no key opens it."""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except (InvalidToken, ValueError, UnicodeDecodeError):
        raise CredentialUnreadable(
            "the stored credential cannot be decrypted with REPOSITORY_CREDENTIAL_KEYS "
            "(was the key it was written under removed?)"
        ) from None


def credential_rotated(ciphertext: str) -> str:
    """The same credential re-encrypted under the first key (MultiFernet.rotate)."""
    try:
        return _fernet().rotate(ciphertext.encode()).decode()
    except InvalidToken:
        raise CredentialUnreadable(
            "the stored credential cannot be decrypted with REPOSITORY_CREDENTIAL_KEYS"
        ) from None
