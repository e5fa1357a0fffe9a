from django.apps import AppConfig


class ControlPlaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Control plane"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from controlplane import checks  # noqa: F401  (registers the system checks)
        from controlplane.services.usage import sqlite_month_trigger_ensure

        # A SQLite table rebuild (some column changes) drops the monthly spend trigger.
        post_migrate.connect(sqlite_month_trigger_ensure, sender=self)

        from django.db.backends.signals import connection_created

        from controlplane.postgres_timestamps import use_compiled_timestamp_loader

        connection_created.connect(
            use_compiled_timestamp_loader, dispatch_uid="controlplane_compiled_timestamps"
        )

        from axes.signals import user_locked_out

        user_locked_out.connect(_sign_in_locked, dispatch_uid="controlplane_sign_in_locked")

        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from controlplane.sign_in import sign_in_failed, sign_in_succeeded

        user_login_failed.connect(sign_in_failed, dispatch_uid="controlplane_sign_in_failed")
        user_logged_in.connect(sign_in_succeeded, dispatch_uid="controlplane_sign_in_succeeded")


def _sign_in_locked(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    from controlplane.services.sign_in_locks import sign_in_lockout_record

    sign_in_lockout_record(username=username, ip_address=ip_address)
