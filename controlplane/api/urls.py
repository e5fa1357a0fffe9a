"""Host API routes: exact paths, no trailing slashes. Ids are matched as text so that a
non-numeric or out-of-range id gets the API's JSON 404 rather than falling through."""

from django.urls import path

from controlplane.api import repositories, views

urlpatterns = [
    path("projects", views.ProjectListView.as_view(), name="projects"),
    path("projects/<str:project_id>", views.ProjectDetailView.as_view(), name="project"),
    path(
        "projects/<str:project_id>/members",
        views.ProjectMembersView.as_view(),
        name="project-members",
    ),
    path(
        "projects/<str:project_id>/members/<str:username>",
        views.ProjectMemberView.as_view(),
        name="project-member",
    ),
    path("projects/<str:project_id>/tasks", views.ProjectTasksView.as_view(), name="project-tasks"),
    path(
        "projects/<str:project_id>/repository",
        repositories.ProjectRepositoryView.as_view(),
        name="project-repository",
    ),
    path(
        "projects/<str:project_id>/memories",
        views.ProjectMemoriesView.as_view(),
        name="project-memories",
    ),
    path("tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task"),
    path("tasks/<str:task_id>/continue", views.TaskContinueView.as_view(), name="task-continue"),
    path("tasks/<str:task_id>/followups", views.TaskFollowupsView.as_view(), name="task-followups"),
    path("tasks/<str:task_id>/runs", views.TaskRunsView.as_view(), name="task-runs"),
    path("tasks/<str:task_id>/diff", repositories.TaskDiffView.as_view(), name="task-diff"),
    path("users/me/memories", views.MyMemoriesView.as_view(), name="my-memories"),
    path("users/me/quota", views.MyQuotaView.as_view(), name="my-quota"),
    path("users/me/tokens", views.MyTokensView.as_view(), name="my-tokens"),
    path("users/me/tokens/<str:token_id>", views.MyTokenDetailView.as_view(), name="my-token"),
    path("users/<str:username>/quota", views.UserQuotaView.as_view(), name="user-quota"),
    path("memories/<str:memory_id>", views.MemoryDetailView.as_view(), name="memory"),
    path(
        "memories/<str:memory_id>/approve",
        views.MemoryApproveView.as_view(),
        name="memory-approve",
    ),
    path(
        "memories/<str:memory_id>/restore",
        views.MemoryRestoreView.as_view(),
        name="memory-restore",
    ),
]
