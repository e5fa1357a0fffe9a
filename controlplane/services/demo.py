"""A demo user and project for trying the control plane locally (`manage.py demo_setup`)."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.models import ApiToken, Project, Role
from controlplane.services.projects import project_create
from controlplane.services.tokens import token_create, token_revoke

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"
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


@transaction.atomic
def demo_setup() -> DemoSetup:
    """Create (or find) the demo user, a staff superuser with password `demo`, and its project,
    and mint a new API token named "demo" (only its hash is stored, so it cannot be shown again).

    Running it again finds the same user and project, mints another token and revokes all but
    the newest `DEMO_TOKENS_KEPT` demo tokens.
    """
    User = get_user_model()
    user, created = User.objects.get_or_create(username=DEMO_USERNAME)
    if created or not (user.is_staff and user.is_superuser and user.check_password(DEMO_PASSWORD)):
        user.is_staff = True
        user.is_superuser = True
        user.set_password(DEMO_PASSWORD)
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
    return DemoSetup(user=user, project=project, token=minted.key)
