from django.urls import path

from automemory.api import views

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
]
