"""Token authentication that refuses malformed keys before they reach the database.

DRF's TokenAuthentication looks any key up as given; on PostgreSQL a key with a NUL
character makes that query fail (a 500). Keys are 40 hex characters, so anything else is
simply an invalid token (401).
"""

import re

from rest_framework import authentication, exceptions

TOKEN_KEY = re.compile(r"[0-9a-f]{40}")


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key):
        if not TOKEN_KEY.fullmatch(key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)
