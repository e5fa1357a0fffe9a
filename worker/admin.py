from django.contrib import admin

from worker.models import CodexSession, TaskRun, WorkerProcess


@admin.register(WorkerProcess)
class WorkerProcessAdmin(admin.ModelAdmin):
    list_display = [
        "worker_id",
        "hostname",
        "pid",
        "executor",
        "started_at",
        "last_seen_at",
        "stopped_at",
    ]
    search_fields = ["worker_id", "hostname"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TaskRun)
class TaskRunAdmin(admin.ModelAdmin):
    list_display = [
        "task",
        "turn",
        "is_resume",
        "worker_id",
        "executor",
        "outcome",
        "started_at",
        "finished_at",
    ]
    list_filter = ["outcome", "executor"]
    search_fields = ["worker_id", "=task__id"]
    raw_id_fields = ["task"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(CodexSession)
class CodexSessionAdmin(admin.ModelAdmin):
    """Stored codex session records: read-only; deleting one makes its thread resumable only
    where a local copy is (docs/worker.md)."""

    list_display = [
        "thread_id",
        "task",
        "turn",
        "storage",
        "size",
        "stored_size",
        "error",
        "updated_at",
    ]
    list_filter = ["storage"]
    search_fields = ["thread_id", "=task__id"]
    raw_id_fields = ["task"]
    exclude = ["data"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
