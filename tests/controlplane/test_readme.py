"""The README's "Try it" block, pasted whole, works against `make run` in a fresh clone.

The clone is of this repository's HEAD (committed work only), with this test's virtualenv as
its `.venv` and a setup stamp newer than its pyproject.toml, so `make run` installs nothing.
The block runs under `bash -euo pipefail` with `curl` failing on any HTTP error (exit 22),
so a step that answers 4xx (a continue while the task is still queued: 409) fails the test.
While the server runs, `var/` is 0700 and the SQLite files 0600.
"""

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .test_deploy import BASE_DIR, SETTINGS_VARIABLES, wait_for_line

README = BASE_DIR / "README.md"


def try_it_block() -> str:
    """The first ``` block after the README's "## Try it" heading."""
    text = README.read_text()
    section = text[text.index("## Try it") :]
    match = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert match, "no code block under ## Try it"
    return match.group(1)


def test_the_block_waits_for_a_final_status_before_continuing():
    block = try_it_block()
    wait = block.index("for _ in $(seq")
    assert wait < block.index("/continue")
    assert "completed|failed|interrupted|merged) break" in block


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def fresh_clone(tmp_path) -> Path:
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    clone = tmp_path / "clone"
    done = subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(BASE_DIR), str(clone)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:  # e.g. a shallow checkout: the same tree from HEAD
        clone.mkdir(exist_ok=True)
        archive = subprocess.run(
            f"git -C {BASE_DIR} archive HEAD | tar -x -C {clone}",
            shell=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert archive.returncode == 0, done.stderr + archive.stderr
    (clone / ".venv").symlink_to(Path(sys.prefix))
    return clone


def test_the_try_it_block_runs_as_pasted_against_make_run(fresh_clone, tmp_path):
    port = _free_port()
    stamp = tmp_path / "setup-stamp"
    stamp.touch()  # newer than the clone's pyproject.toml: `make run` installs nothing
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    env.pop("CACHE_URL", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    out_path = tmp_path / "make-run.out"
    with out_path.open("wb") as out:
        server = subprocess.Popen(
            ["make", "run", f"ADDR=127.0.0.1:{port}", f"STAMP={stamp}"],
            cwd=fresh_clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_line(out_path.read_text, r"Press Ctrl-C to stop\.", timeout=240)
        script = (
            'curl() { command curl --fail-with-body "$@"; }\n'  # any 4xx or 5xx fails the step
            + try_it_block()
        )
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=fresh_clone,
            env={**env, "API": f"http://127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
        assert re.search(r"^task \d+: completed$", done.stdout, re.M), done.stdout[-3000:]

        var = fresh_clone / "var"
        database = var / "controlplane.sqlite3"
        assert _mode(var) == 0o700
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{database}{suffix}")
            assert path.exists() and _mode(path) == 0o600, (path, oct(_mode(path)))
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
