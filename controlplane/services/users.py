"""Users (their API tokens: controlplane.services.tokens)."""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.errors import DomainError
from controlplane.limits import text_problem


@transaction.atomic
def user_get_or_create(*, username: str, is_staff: bool = False):
    """Find the user or create one (with no usable password); `is_staff` promotes, never demotes.

    Returns `(user, created)`.
    """
    User = get_user_model()
    problem = text_problem(username)
    if problem:
        raise DomainError(problem, field="username")
    try:
        User.username_validator(username)
    except ValidationError as exc:
        raise DomainError(" ".join(exc.messages), field="username") from None
    if not username or len(username) > User._meta.get_field("username").max_length:
        raise DomainError("A username has 1 to 150 characters.", field="username")
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
    if is_staff:
        user.is_staff = True
    user.save()
    return user, created
