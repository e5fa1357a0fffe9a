"""Files of the app's own that only its user may read: `var/` and a SQLite database.

`var/` holds the development secret key, the demo password, the file cache and the default
SQLite database (prompts, results, memories, password hashes), so it is created mode 0700. A
SQLite database file is created empty with mode 0600 before SQLite opens it: SQLite gives
its `-wal` and `-shm` files the database file's mode, so they are 0600 too. Files already
there are tightened to those modes (when this user owns them). Imported by the settings, so
it depends on nothing but the standard library.
"""

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & ~mode:
        path.chmod(mode)


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may enter (created when missing)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _tighten(path, DIR_MODE)
    return path


def private_sqlite_files(database: Path) -> None:
    """Create the SQLite database file 0600 if it is missing (its directory must exist), and
    tighten it and its -wal, -shm and -journal files to 0600."""
    if not database.parent.is_dir():
        return
    try:
        os.close(os.open(database, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    except OSError:
        return  # read-only place: SQLite will say so
    for suffix in ("", *SQLITE_SIDE_FILES):
        _tighten(Path(f"{database}{suffix}"), FILE_MODE)
