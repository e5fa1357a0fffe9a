"""Check constraints written the same way in many models."""

from django.db import models
from django.db.models import Q


def choices_check(field: str, choices: type[models.Choices], name: str) -> models.CheckConstraint:
    """The database's check that `field` holds one of the values of `choices`."""
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)
