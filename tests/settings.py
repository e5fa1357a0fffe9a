"""Settings for the test suite: the real settings, with what the tests need set explicitly.

pytest-django imports this module before any conftest, and the processes the tests start
(workers, servers) inherit the environment set here.
"""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x" * 40)
# Agents' task rooms (worker/sandbox.py) outside the checkout; worker processes the tests
# start inherit the same folder.
os.environ.setdefault("WORKER_TASK_ROOT", tempfile.mkdtemp(prefix="controlplane-tasks-"))
os.environ.setdefault("WORKER_REPO_CACHE", tempfile.mkdtemp(prefix="controlplane-repos-"))

from controlplane.settings import *  # noqa: F403

# Tests do not run collectstatic: plain static file names, no manifest needed.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# No test may reach a real model endpoint: the model client points at a closed local port
# with a dummy key unless a test starts the fake OpenAI server (the `fake_openai` fixture),
# which overrides both.
AUTOMEMORY_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
AUTOMEMORY_OPENAI_API_KEY = "tests-dummy-key"
