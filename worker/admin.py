from django.contrib import admin

from controlplane.admin import NoAddOrChangeAdminMixin
from worker.code_signature import code_signature_matches, code_signature_newest_subquery
from worker.models import CodexSession, TaskRun, WorkerProcess


@admin.register(WorkerProcess)
class WorkerProcessAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
    """Worker processes: read-only; `code` is the signature of the code each started with,
    `newest code` whether it is the newest one running workers report (a worker that runs
    older code is one a deploy has not reached)."""

    list_display = [
        "worker_id",
        "hostname",
        "pid",
        "executor",
        "code",
        "newest_code",
        "started_at",
        "last_seen_at",
        "stopped_at",
    ]
    search_fields = ["worker_id", "hostname", "code_signature"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(newest=code_signature_newest_subquery())

    @admin.display(description="code", ordering="code_signature")
    def code(self, obj):
        return obj.code_signature[:12] or "-"

    @admin.display(description="newest code", boolean=True)
    def newest_code(self, obj):
        return code_signature_matches(
            signature=obj.code_signature, newest=getattr(obj, "newest", None) or ""
        )


@admin.register(TaskRun)
class TaskRunAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
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


@admin.register(CodexSession)
class CodexSessionAdmin(NoAddOrChangeAdminMixin, admin.ModelAdmin):
    """Stored codex sessions: read-only; deleting one makes its thread resumable only
    where a local copy is (docs/codex.md)."""

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
