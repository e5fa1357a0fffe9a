from django.urls import path

from automemory.console import insight_views, memory_views, review_views, task_views, views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("sign-in", views.SignInView.as_view(), name="sign-in"),
    path("sign-out", views.SignOutView.as_view(), name="sign-out"),
    path("settings", views.settings_page, name="settings"),
    path("log", views.log_page, name="log"),
    path("run", views.run_now, name="run"),
    path("projects", memory_views.projects, name="projects"),
    path(
        "projects/<str:project_id>/memories",
        memory_views.project_memories,
        name="project_memories",
    ),
    path("projects/<str:project_id>/review", review_views.project_review, name="project_review"),
    path(
        "projects/<str:project_id>/preview",
        insight_views.project_preview,
        name="project_preview",
    ),
    path("projects/<str:project_id>/health", insight_views.project_health, name="project_health"),
    path("memories/<str:memory_id>", memory_views.memory_detail, name="memory"),
    path("memories/<str:memory_id>/report", review_views.memory_report_page, name="memory_report"),
    path("memories/<str:memory_id>/share", review_views.memory_share_action, name="memory_share"),
    path("memories/<str:memory_id>/edit", memory_views.memory_edit, name="memory_edit"),
    path("memories/<str:memory_id>/delete", memory_views.memory_delete, name="memory_delete"),
    path("memories/<str:memory_id>/approve", memory_views.memory_approve, name="memory_approve"),
    path("memories/<str:memory_id>/restore", memory_views.memory_restore, name="memory_restore"),
    *(
        path(
            f"memories/<str:memory_id>/code/{decision}",
            review_views.memory_code_decide,
            {"decision": decision},
            name=f"memory_code_{decision}",
        )
        for decision in ("keep", "retire")
    ),
    path("me/memories", memory_views.my_memories, name="my_memories"),
    path("tasks/<str:task_id>", task_views.task_detail, name="task"),
    path("tasks/<str:task_id>/flags", task_views.task_flags, name="task_flags"),
]
