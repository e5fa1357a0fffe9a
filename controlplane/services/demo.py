"""A demo user and project for trying the control plane locally (`manage.py demo_setup`)."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.models import Project, Role
from controlplane.services.projects import project_create
from controlplane.services.users import token_get_or_create

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"
DEMO_PROJECT_NAME = "demo"


@dataclass(frozen=True)
class DemoSetup:
    user: object
    project: Project
    token: str


@transaction.atomic
def demo_setup() -> DemoSetup:
    """Create (or find) the demo user, a staff superuser with password `demo`, and its project.

    Idempotent: running it again changes nothing and returns the same user, project and token.
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
    return DemoSetup(user=user, project=project, token=token_get_or_create(user=user))
