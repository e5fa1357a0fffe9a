from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "worker"
    verbose_name = "Worker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from worker import checks  # noqa: F401  (registers the system checks)
