"""Settings for the test suite: the real settings, with what the tests need set explicitly.

pytest-django imports this module before any conftest, and the processes the tests start
(workers, servers) inherit the environment set here.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x" * 40)

from controlplane.settings import *  # noqa: F403

# Tests do not run collectstatic: plain static file names, no manifest needed.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
