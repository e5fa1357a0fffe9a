from django.urls import path

from automemory.api import memory_tools, views

urlpatterns = [
    path(
        "users/me/auto-memory-settings",
        views.AutoMemorySettingsView.as_view(),
        name="auto-memory-settings",
    ),
    path(
        "tasks/<str:task_id>/auto-memory-flags",
        views.TaskAutoMemoryFlagsView.as_view(),
        name="auto-memory-flags",
    ),
    path("users/me/auto-memory/run", views.AutoMemoryRunView.as_view(), name="auto-memory-run"),
    path("users/me/auto-memory-log", views.AutoMemoryLogView.as_view(), name="auto-memory-log"),
    path("memories/<str:memory_id>/report", views.MemoryReportView.as_view(), name="memory-report"),
    path(
        "memories/<str:memory_id>/feedback",
        views.MemoryFeedbackView.as_view(),
        name="memory-feedback",
    ),
    path("memories/<str:memory_id>/share", views.MemoryShareView.as_view(), name="memory-share"),
    path(
        "projects/<str:project_id>/memory-preview",
        views.MemoryPreviewView.as_view(),
        name="memory-preview",
    ),
    # The memory tools, under a task key (no trailing slash: the relay posts to the name).
    *(
        path(f"memory-tools/{tool}", view.as_view(), name=f"memory-tool-{tool}")
        for tool, view in memory_tools.VIEWS.items()
    ),
]
