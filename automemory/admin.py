"""Admin pages for auto memory settings, per-task flags, the extraction log and the memories'
usage (read-only).

Settings and flags are saved through the same services as the API's
(`automemory.services.preferences`), so a change made here also has the next sweep look again
at the tasks it skipped. They are not deleted here: a change (a flag back to "follow the
user", a switch off) says the same and keeps that path.
"""

from django.contrib import admin

from automemory.models import (
    AutoMemoryLog,
    AutoMemorySettings,
    ExtractionDraft,
    MemoryGoal,
    MemoryState,
    SweepState,
    TaskAutoMemoryFlags,
)
from automemory.services.preferences import SETTINGS_FIELDS, flags_set, settings_update
from controlplane.admin import NoAddOrChangeAdminMixin, ReadOnlyAdminMixin

FLAG_FIELDS = ("use_memories", "generate_memories")


def _changes(form, names, *, change: bool) -> dict:
    """The submitted values of `names`: all of them for a new row, else only those changed."""
    return {
        name: form.cleaned_data[name]
        for name in names
        if name in form.cleaned_data and (not change or name in form.changed_data)
    }


@admin.register(AutoMemorySettings)
class AutoMemorySettingsAdmin(admin.ModelAdmin):
    list_display = [
        "user",
        "generate_memories",
        "use_memories",
        "disable_on_external_context",
        "min_rate_limit_remaining_percent",
        "idle_seconds",
        "updated_at",
    ]
    list_filter = ["generate_memories", "use_memories", "disable_on_external_context"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]

    def get_fields(self, request, obj=None):
        return ["user", *SETTINGS_FIELDS, "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        return ["created_at", "updated_at"] + (["user"] if obj is not None else [])

    def save_model(self, request, obj, form, change) -> None:
        changes = _changes(form, SETTINGS_FIELDS, change=change)
        if not changes and change:
            return
        saved = settings_update(user=obj.user, changes=changes, actor=request.user)
        obj.pk, obj.created_at, obj.updated_at = saved.pk, saved.created_at, saved.updated_at

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(TaskAutoMemoryFlags)
class TaskAutoMemoryFlagsAdmin(admin.ModelAdmin):
    list_display = ["task", "use_memories", "generate_memories", "updated_by", "updated_at"]
    list_filter = ["use_memories", "generate_memories"]
    search_fields = ["task__id", "task__user__username"]
    raw_id_fields = ["task"]
    fields = ["task", *FLAG_FIELDS, "updated_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        return ["updated_by", "created_at", "updated_at"] + (["task"] if obj is not None else [])

    def save_model(self, request, obj, form, change) -> None:
        changes = _changes(form, FLAG_FIELDS, change=change)
        if not changes and change:
            return
        # An operator's change, not a member's: the admin may turn a switch on.
        saved = flags_set(task=obj.task, actor=request.user, changes=changes, operator=True)
        obj.pk, obj.updated_by = saved.pk, saved.updated_by
        obj.created_at, obj.updated_at = saved.created_at, saved.updated_at

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(MemoryState)
class MemoryStateAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Each memory's usage counters and report hold, as the injector and feedback wrote them,
    and the instruction flags of its text with their approval (read-only: they count what
    tasks did; an owner approves through the memory's approve action, which audits it)."""

    list_display = [
        "memory",
        "injection_count",
        "last_injected_at",
        "cite_count",
        "report_count",
        "report_hold_at",
        "flagged",
        "instruction_flags",
        "approved_at",
        "approved_by",
    ]
    list_filter = [
        ("report_hold_at", admin.EmptyFieldListFilter),
        "flagged",
        ("approved_at", admin.EmptyFieldListFilter),
    ]
    list_select_related = ["memory", "approved_by"]
    search_fields = ["memory__id", "memory__content"]


@admin.register(MemoryGoal)
class MemoryGoalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Each auto memory's goal, as the writer stored it, and the copies its one-active-per-
    goal rule reads (read-only: triggers on the host's memory keep them in step)."""

    list_display = [
        "memory",
        "goal_key",
        "source_finished_at",
        "project_id",
        "author_id",
        "visibility",
        "active",
    ]
    list_filter = ["active", "visibility"]
    list_select_related = ["memory"]
    search_fields = ["memory__id", "goal_key"]


@admin.register(AutoMemoryLog)
class AutoMemoryLogAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Written only by the sweep: operators read it here, they do not edit it."""

    list_display = [
        "task",
        "user",
        "outcome",
        "reason",
        "memory",
        "forced",
        "attempts",
        "last_attempt_at",
    ]
    list_filter = ["outcome", "reason", "forced", "recheck"]
    search_fields = ["task__id", "user__username", "detail"]
    list_select_related = ["task", "user", "memory"]
    date_hierarchy = "last_attempt_at"


@admin.register(SweepState)
class SweepStateAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
    """Each sweep's cursor and lease (who sweeps, until when). Read-only: a dead holder's
    lease expires by itself; deleting a `user:` row only resets that user's cursor."""

    list_display = [
        "name",
        "lease_holder",
        "lease_expires_at",
        "lease_generation",
        "last_sweep_at",
        "cursor_updated_at",
        "cursor_task_id",
    ]
    search_fields = ["name", "lease_holder"]


@admin.register(ExtractionDraft)
class ExtractionDraftAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
    """Paid extractions not yet written (a sweep died, or the consolidation step failed).
    Read-only; deleting one makes the next sweep pay for that extraction again."""

    list_display = ["task", "extract_model", "created_at", "task_updated_at"]
    list_select_related = ["task"]
    search_fields = ["task__id", "extract_model"]
