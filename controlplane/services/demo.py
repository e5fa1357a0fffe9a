"""A demo user and project for trying the control plane locally (`manage.py demo_setup`)."""

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.models import ApiToken, Project, Role
from controlplane.services.projects import project_create
from controlplane.services.tokens import token_create, token_revoke

DEMO_USERNAME = "demo"
# The demo user's password is generated once into var/ (like `make run`'s secret key) and
# printed by `make run`: a server started with DEBUG off never has a guessable superuser.
DEMO_PASSWORD_FILE = "demo-password"
DEMO_PROJECT_NAME = "demo"
DEMO_TOKEN_NAME = "demo"
# `make run` sets the demo up three times (demo_setup, demo_auto_memory, run_main), each
# printing a fresh token: they all stay valid; older demo tokens are revoked.
DEMO_TOKENS_KEPT = 5


@dataclass(frozen=True)
class DemoSetup:
    user: object
    project: Project
    token: str
    password: str


def demo_password(var_dir: Path | None = None) -> str:
    """The demo user's password: read from `var/demo-password`, generated there (owner-only)
    the first time, so it is random per checkout yet stable across runs."""
    path = Path(var_dir or settings.VAR_DIR) / DEMO_PASSWORD_FILE
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        password = path.read_text().strip()
        if password:
            return password
        # An empty file (cut short while being written): write a password again.
        descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC)
    password = secrets.token_urlsafe(12)
    with os.fdopen(descriptor, "w") as out:
        out.write(password + "\n")
    return password


@transaction.atomic
def demo_setup() -> DemoSetup:
    """Create (or find) the demo user, a staff superuser with the password of `demo_password()`,
    and its project,
    and mint a new API token named "demo" (only its hash is stored, so it cannot be shown again).

    Running it again finds the same user and project, mints another token and revokes all but
    the newest `DEMO_TOKENS_KEPT` demo tokens.
    """
    User = get_user_model()
    password = demo_password()
    user, created = User.objects.get_or_create(username=DEMO_USERNAME)
    if created or not (user.is_staff and user.is_superuser and user.check_password(password)):
        user.is_staff = True
        user.is_superuser = True
        user.set_password(password)
        user.save()
    project = (
        Project.objects.filter(
            name=DEMO_PROJECT_NAME,
            memberships__user=user,
            memberships__role=Role.OWNER,
        )
        .order_by("id")
        .first()
    )
    if project is None:
        project = project_create(user=user, name=DEMO_PROJECT_NAME)
    minted = token_create(user=user, name=DEMO_TOKEN_NAME)
    older = ApiToken.objects.filter(
        user=user, name=DEMO_TOKEN_NAME, revoked_at__isnull=True
    ).order_by("-created_at", "-id")[DEMO_TOKENS_KEPT:]
    for token in older:
        token_revoke(token=token, actor=user)
    return DemoSetup(user=user, project=project, token=minted.key, password=password)
