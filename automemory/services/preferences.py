"""A user's auto memory settings and a task's flags, and what is in effect for a task."""

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from automemory.models import (
    AutoMemoryLog,
    AutoMemorySettings,
    Outcome,
    TaskAutoMemoryFlags,
)
from controlplane.models import Task
from controlplane.services.audit import audit_record

SETTINGS_FIELDS = (
    "generate_memories",
    "use_memories",
    "disable_on_external_context",
    "min_rate_limit_remaining_percent",
    "idle_seconds",
    "min_duration_seconds",
    "min_result_chars",
    "extract_model",
    "consolidation_model",
    "internal_mcp_servers",
    "injection_ranking",
    "injection_max_chars",
    "max_unused_days",
    "monthly_memory_budget_usd",
    "fallback_to_deterministic",
    "share_private_derived",
    "personal_memories_in_shared_projects",
)


def settings_get(*, user_id: int) -> AutoMemorySettings:
    """The user's settings; an unsaved row with the defaults when they never changed any."""
    try:
        return AutoMemorySettings.objects.get(user_id=user_id)
    except AutoMemorySettings.DoesNotExist:
        return AutoMemorySettings(user_id=user_id)


@transaction.atomic
def settings_update(*, user, changes: dict[str, Any], actor=None) -> AutoMemorySettings:
    """Apply validated `changes` to the user's settings (creating the row on first change).

    The one path for a settings change (API, admin, `manage.py auto_memory_settings`), so the
    recheck of stable skips always follows. `actor` is who changed them, when not the user.
    """
    unknown = set(changes) - set(SETTINGS_FIELDS)
    if unknown:
        raise ValueError(f"unknown settings: {sorted(unknown)}")
    current, _ = AutoMemorySettings.objects.select_for_update().get_or_create(user=user)
    for name, value in changes.items():
        setattr(current, name, value)
    current.full_clean()
    current.save()
    # Tasks skipped under the old settings get a fresh look at the next sweep (a retracted
    # task never does: it is never extracted again).
    AutoMemoryLog.objects.filter(
        user=user, outcome=Outcome.SKIPPED, recheck=False, retracted_at__isnull=True
    ).update(recheck=True)
    audit_record(
        action="auto_memory_settings_updated",
        actor=actor or user,
        target_type="user",
        target_id=user.pk,
        # Decimals (the memory budget) as strings: the audit log is JSON.
        data={"changes": {k: str(v) if isinstance(v, Decimal) else v for k, v in changes.items()}},
    )
    return current


def flags_get(*, task_id: int) -> TaskAutoMemoryFlags:
    """The task's flags; an unsaved row of NULLs (follow the user) when none were set."""
    try:
        return TaskAutoMemoryFlags.objects.get(task_id=task_id)
    except TaskAutoMemoryFlags.DoesNotExist:
        return TaskAutoMemoryFlags(task_id=task_id)


FLAG_FIELDS = ("use_memories", "generate_memories")
FLAG_TURNED_ON = (
    "Only the task's user may turn this on for their task (it would override their own "
    "setting); other members may turn it off."
)


@transaction.atomic
def flags_set(
    *, task: Task, actor, changes: dict[str, bool | None], operator: bool = False
) -> TaskAutoMemoryFlags:
    """Set the task's per-task overrides (`None` = follow the user's setting).

    The task's user may set anything (and an `operator`: the admin). Another member may turn
    a switch off, never on against the task's user: a `true` or `null` that would turn it on
    is refused (a `ValidationError` naming each such field, nothing saved); one that leaves
    it as it is changes nothing, and a `true` is never stored for them (it would outlive a
    later "off" of the user's own setting).
    """
    flags, _ = TaskAutoMemoryFlags.objects.select_for_update().get_or_create(task=task)
    if not operator and getattr(actor, "pk", None) != task.user_id:
        changes = _changes_by_another_member(task=task, flags=flags, changes=changes)
    for name in FLAG_FIELDS:
        if name in changes:
            setattr(flags, name, changes[name])
    flags.updated_by = actor
    flags.save()
    AutoMemoryLog.objects.filter(
        task=task, outcome=Outcome.SKIPPED, retracted_at__isnull=True
    ).update(recheck=True)
    audit_record(
        action="auto_memory_flags_set",
        actor=actor,
        target_type="task",
        target_id=task.pk,
        data={name: changes[name] for name in changes},
    )
    return flags


def _changes_by_another_member(
    *, task: Task, flags: TaskAutoMemoryFlags, changes: dict[str, bool | None]
) -> dict[str, bool | None]:
    """The changes a member who is not the task's user may make: off always; `true` or `null`
    only when the switch stays as it is or ends off (then a `true` is not stored)."""
    prefs = settings_get(user_id=task.user_id)
    allowed, refused = {}, {}
    for name, value in changes.items():
        stored = getattr(flags, name)
        if value is False or value == stored:
            allowed[name] = value
            continue
        user_setting = getattr(prefs, name)
        now_on = effective_switch(stored, user_setting)
        if not effective_switch(value, user_setting):
            allowed[name] = value  # null, following a user whose setting is off
        elif not now_on:
            refused[name] = [FLAG_TURNED_ON]
        elif value is None:
            allowed[name] = value  # on, and still on: it follows the user's own setting
    if refused:
        raise ValidationError(refused)
    return allowed


def effective_switch(flag: bool | None, user_setting: bool) -> bool:
    """A task flag wins when set; NULL follows the user's setting."""
    return user_setting if flag is None else flag
