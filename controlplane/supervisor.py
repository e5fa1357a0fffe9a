"""Run a few child processes together: signals go to all, and one exiting stops the rest
(unless it asks to be restarted)."""

import signal
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence

# A child that exits with this status asks to be started again (EX_TEMPFAIL, sysexits.h): a
# worker whose code changed on disk (worker/code_signature.py).
EXIT_RESTART = 75


class Supervisor:
    """Start each named command; wait until one exits or a signal arrives; stop the others.

    A SIGINT or SIGTERM is forwarded once to every child (a worker finishes the task in hand);
    a second one is forwarded again (a worker then exits at once). Children still running
    `grace_seconds` after being asked to stop are killed. `run()` returns the exit code of
    the first child to exit, or 0 when the supervisor was stopped by a signal. `pass_fds`
    names the file descriptors (a listening socket) a child inherits. A child named in
    `restartable` that exits with `EXIT_RESTART` is started again, the others left running
    (at most once per `restart_min_seconds`: a child that asks again sooner waits that long).
    """

    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        *,
        grace_seconds: float = 30.0,
        poll_seconds: float = 0.2,
        pass_fds: Mapping[str, Sequence[int]] | None = None,
        restartable: Collection[str] = (),
        restart_min_seconds: float = 1.0,
    ):
        self.commands = dict(commands)
        self.grace_seconds = grace_seconds
        self.poll_seconds = poll_seconds
        self.pass_fds = dict(pass_fds or {})
        self.restartable = frozenset(restartable)
        self.restart_min_seconds = restart_min_seconds
        self.restarts: dict[str, int] = {}
        self.children: dict[str, subprocess.Popen] = {}
        self._started_at: dict[str, float] = {}
        self._pending_signals: list[int] = []

    def _on_signal(self, signum, frame) -> None:
        self._pending_signals.append(signum)

    def _log(self, message: str) -> None:
        print(f"[run_main] {message}", file=sys.stderr, flush=True)

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for name in self.commands:
                self._start(name)
            code = self._wait_for_first_exit()
            self._stop_all()
            return code
        finally:
            for child in self.children.values():
                if child.poll() is None:
                    child.kill()
                    child.wait()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self, name: str) -> None:
        # Each child gets its own session, so a terminal's Ctrl-C reaches it once, through
        # us, rather than twice.
        self.children[name] = subprocess.Popen(
            self.commands[name], start_new_session=True, pass_fds=self.pass_fds.get(name, ())
        )
        self._started_at[name] = time.monotonic()

    def _restart(self, name: str) -> None:
        """Start `name` again, waiting first if it ran less than `restart_min_seconds`
        (signals arriving meanwhile are kept for the caller)."""
        self._log(f"{name} exited with code {EXIT_RESTART} (restart me), starting it again")
        wait_until = self._started_at[name] + self.restart_min_seconds
        while time.monotonic() < wait_until and not self._pending_signals:
            time.sleep(max(0.0, min(self.poll_seconds, wait_until - time.monotonic())))
        if self._pending_signals:
            return  # stopping: it stays exited
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._start(name)

    def _forward_pending(self) -> bool:
        forwarded = False
        while self._pending_signals:
            signum = self._pending_signals.pop(0)
            self._log(f"got {signal.Signals(signum).name}, passing it on")
            for child in self.children.values():
                if child.poll() is None:
                    child.send_signal(signum)
            forwarded = True
        return forwarded

    def _wait_for_first_exit(self) -> int:
        while True:
            if self._forward_pending():
                return 0
            for name, child in list(self.children.items()):
                code = child.poll()
                if code == EXIT_RESTART and name in self.restartable:
                    self._restart(name)
                    break
                if code is not None:
                    self._log(f"{name} exited with code {code}, stopping the rest")
                    for other in self.children.values():
                        if other.poll() is None:
                            other.send_signal(signal.SIGTERM)
                    return code
            time.sleep(self.poll_seconds)

    def _stop_all(self) -> None:
        deadline = time.monotonic() + self.grace_seconds
        while time.monotonic() < deadline:
            self._forward_pending()
            if all(child.poll() is not None for child in self.children.values()):
                return
            time.sleep(self.poll_seconds)
        for name, child in self.children.items():
            if child.poll() is None:
                self._log(f"{name} did not stop in {self.grace_seconds:g}s, killing it")
                child.kill()
                child.wait()
