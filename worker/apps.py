from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "worker"
    verbose_name = "Worker"
    default_auto_field = "django.db.models.BigAutoField"
