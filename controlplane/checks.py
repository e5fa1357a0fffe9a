"""System checks of the host: what `manage.py check --deploy` warns about."""

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

PER_PROCESS_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
    "django.core.cache.backends.filebased.FileBasedCache",
)


@register(Tags.security, Tags.caches, deploy=True)
def shared_cache_check(app_configs, **kwargs) -> list[Warning]:
    """Sign-in locks (django-axes) and API throttles count in the default cache: a deployment
    with several processes needs one they share. (axes' own `axes.W001` says the same at
    every command, so it is silenced in favour of this deploy-time warning.)"""
    backend = settings.CACHES.get("default", {}).get("BACKEND", "")
    if backend not in PER_PROCESS_CACHES:
        return []
    return [
        Warning(
            "The default cache is not shared between processes: sign-in locks and API "
            "throttles count per process (or racily, in a file cache).",
            hint="Set CACHE_URL to a cache every API process shares, e.g. "
            "redis://HOST:6379/0 (docs/deploy.md).",
            id="controlplane.W001",
        )
    ]


@register(Tags.security)
def repository_credential_keys_check(app_configs, **kwargs) -> list[Error]:
    """Keys that are not Fernet keys would fail every credential read: refuse to start."""
    from controlplane.credentials import credential_keys_problem

    problem = credential_keys_problem()
    if not problem:
        return []
    return [Error(problem, id="controlplane.E001")]
