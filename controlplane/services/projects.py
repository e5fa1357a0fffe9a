"""Projects and memberships."""

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.errors import ConflictError, DomainError, NotFoundError
from controlplane.limits import PROJECT_NAME_MAX_CHARS, text_require
from controlplane.models import Membership, Project, Role
from controlplane.services.audit import audit_record


@transaction.atomic
def project_create(*, user, name: str) -> Project:
    """Create a project; its creator becomes its owner."""
    name = text_require(name, field="name", max_chars=PROJECT_NAME_MAX_CHARS).strip()
    project = Project.objects.create(name=name, created_by=user)
    Membership.objects.create(project=project, user=user, role=Role.OWNER)
    audit_record(action="project_created", actor=user, target_type="project", target_id=project.pk)
    return project


@transaction.atomic
def membership_set(*, actor, project: Project, username: str, role: str) -> tuple[Membership, bool]:
    """Add `username` to the project with `role`, or change their role.

    Returns the membership and whether it was created. The project row is locked while the
    change is made, so two owners demoting each other at once cannot leave it ownerless.
    """
    if role not in Role.values:
        raise DomainError(f'"{role}" is not a valid choice.', field="role")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise DomainError("No user with this username.", field="username")

    Project.objects.select_for_update().filter(pk=project.pk).first()
    membership = Membership.objects.filter(project=project, user=user).first()
    if membership is None:
        membership = Membership.objects.create(project=project, user=user, role=role)
        created = True
    else:
        created = False
        if membership.role == Role.OWNER and role != Role.OWNER:
            _last_owner_refuse(project)
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role", "updated_at"])
    audit_record(
        action="membership_set",
        actor=actor,
        target_type="project",
        target_id=project.pk,
        data={"user_id": user.pk, "role": role, "created": created},
    )
    return membership, created


def _last_owner_refuse(project: Project) -> None:
    """`ConflictError` when the project has one owner at most: that owner must stay one."""
    if Membership.objects.filter(project=project, role=Role.OWNER).count() <= 1:
        raise ConflictError("This is the project's last owner; make someone else owner first.")


@transaction.atomic
def membership_remove(*, actor, project: Project, username: str) -> None:
    """Remove `username` from the project (`NotFound` when they are not a member).

    The project row is locked, as for a role change, so its last owner cannot be removed
    (`ConflictError`). From then on the project does not exist for them: their queued tasks
    are refused at claim and their running tasks' memory keys at the next call.
    """
    Project.objects.select_for_update().filter(pk=project.pk).first()
    membership = (
        Membership.objects.select_related("user")
        .filter(project=project, user__username=username)
        .first()
    )
    if membership is None:
        raise NotFoundError("No member with this username.")
    if membership.role == Role.OWNER:
        _last_owner_refuse(project)
    membership.delete()
    audit_record(
        action="membership_removed",
        actor=actor,
        target_type="project",
        target_id=project.pk,
        data={"user_id": membership.user_id, "role": membership.role},
    )
