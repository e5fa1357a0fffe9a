from django.urls import path

from automemory.console import views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("sign-in", views.SignInView.as_view(), name="sign-in"),
    path("sign-out", views.SignOutView.as_view(), name="sign-out"),
    path("settings", views.settings_page, name="settings"),
    path("log", views.log_page, name="log"),
    path("run", views.run_now, name="run"),
]
