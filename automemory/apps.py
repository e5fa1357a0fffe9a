from django.apps import AppConfig


class AutoMemoryConfig(AppConfig):
    name = "automemory"
    verbose_name = "Auto memory"
    default_auto_field = "django.db.models.BigAutoField"
