from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Control plane"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from controlplane.services.usage import sqlite_month_trigger_ensure

        # A SQLite table rebuild (some column changes) drops the monthly spend trigger.
        post_migrate.connect(sqlite_month_trigger_ensure, sender=self)
