"""var/ is 0700, and a SQLite database with its -wal and -shm files is 0600, whatever the
umask: they hold prompts, memories and password hashes."""

import os
import stat
import subprocess
import sys

from controlplane.private_files import private_dir, private_sqlite_files

from .test_deploy import BASE_DIR, process_env

PROBE = """
import os, stat, django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS probe (x integer)")
    cursor.execute("INSERT INTO probe VALUES (1)")
    name = connection.settings_dict["NAME"]
    for suffix in ("", "-wal", "-shm"):
        print(suffix or "db", oct(stat.S_IMODE(os.stat(f"{name}{suffix}").st_mode)))
"""


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_database_and_its_wal_and_shm_files_are_0600_under_a_loose_umask(tmp_path):
    database = tmp_path / "db" / "app.sqlite3"
    database.parent.mkdir()
    env = process_env(tmp_path, DEBUG="1", DATABASE_URL=f"sqlite:///{database}")
    done = subprocess.run(
        ["sh", "-c", f"umask 022 && exec {sys.executable} -c '{PROBE}'"],
        cwd=BASE_DIR,
        env={**env, "DJANGO_SETTINGS_MODULE": "controlplane.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["db", "0o600", "-wal", "0o600", "-shm", "0o600"]


def test_existing_files_are_tightened(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    database = var / "app.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        path = var / f"app.sqlite3{suffix}"
        path.write_bytes(b"")
        path.chmod(0o644)
    private_dir(var)
    private_sqlite_files(database)
    assert _mode(var) == 0o700
    assert {_mode(var / f"app.sqlite3{s}") for s in ("", "-wal", "-shm")} == {0o600}


def test_a_missing_directory_is_created_private(tmp_path):
    os.umask(old := os.umask(0o022))
    try:
        os.umask(0o022)
        created = private_dir(tmp_path / "a" / "var")
    finally:
        os.umask(old)
    assert _mode(created) == 0o700
    private_sqlite_files(tmp_path / "missing-dir" / "x.sqlite3")  # no directory: nothing made
    assert not (tmp_path / "missing-dir").exists()
