from django.apps import AppConfig


class AutoMemoryConfig(AppConfig):
    name = "automemory"
    verbose_name = "Auto memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from automemory import checks  # noqa: F401  (registers the system checks)
