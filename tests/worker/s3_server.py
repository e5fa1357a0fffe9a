"""A real S3-compatible server for the tests: moto's server mode in a child process.

It listens on 127.0.0.1 on a free port and speaks S3 over HTTP, so django-storages and boto3
talk to it exactly as to a bucket elsewhere (no patching of either).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """`with S3Server(log) as s3:` starts the server; `s3.endpoint_url` is its address."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> S3Server:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the S3 server exited:\n{self.log.read_text()}")
            try:
                urllib.request.urlopen(self.endpoint_url + "/", timeout=1).close()
                return self
            except urllib.error.HTTPError:
                return self  # it answers
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"the S3 server did not answer in 30s:\n{self.log.read_text()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
