"""Admin pages for auto memory settings, per-task flags and the extraction log (read-only)."""

from django.contrib import admin

from automemory.models import AutoMemoryLog, AutoMemorySettings, SweepState, TaskAutoMemoryFlags


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
    readonly_fields = ["created_at", "updated_at"]


@admin.register(TaskAutoMemoryFlags)
class TaskAutoMemoryFlagsAdmin(admin.ModelAdmin):
    list_display = ["task", "use_memories", "generate_memories", "updated_by", "updated_at"]
    list_filter = ["use_memories", "generate_memories"]
    search_fields = ["task__id", "task__user__username"]
    raw_id_fields = ["task", "updated_by"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(AutoMemoryLog)
class AutoMemoryLogAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SweepState)
class SweepStateAdmin(admin.ModelAdmin):
    list_display = ["name", "cursor_updated_at", "cursor_task_id", "last_sweep_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
