"""Settings for the benchmarks: the project's settings, runnable as they are on a fresh clone.

The real settings refuse to start with `DEBUG` off and no `SECRET_KEY`; a benchmark signs
nothing, so it gets a key of its own. Nothing here changes what is measured. `DATABASE_URL`
is set by the harness (a throwaway database), and the model client points at a closed
local port unless a benchmark starts its fake model server.
"""

import os

os.environ.setdefault("SECRET_KEY", "benchmarks-only-not-secret-" + "x" * 40)
os.environ.setdefault("LOG_LEVEL", "WARNING")

from controlplane.settings import *  # noqa: F403

# No collectstatic in a benchmark: plain static file names, no manifest needed.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

AUTOMEMORY_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
AUTOMEMORY_OPENAI_API_KEY = "benchmarks-dummy-key"
