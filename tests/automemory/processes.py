"""Sweeping processes for the PostgreSQL concurrency tests: real `process_auto_memories`
calls in separate Python processes against the test database and a fake model server."""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from django.db import connection

BASE_DIR = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database's URL, for a process of its own."""
    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def sweeping_process_start(base_url: str, code: str) -> subprocess.Popen:
    """Run `code` (after `django.setup()`) in a new process whose model server is `base_url`."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "test-key",
    }
    return subprocess.Popen(
        [sys.executable, "-c", f"import django; django.setup(); exec({code!r})"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
