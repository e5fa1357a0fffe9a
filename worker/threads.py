"""The threads that run beside a worker's rounds, each on its own database connection.

- `Heartbeat`: refreshes the heartbeat of the task in hand while its agent runs (and cancels
  the run when the task was taken over);
- `StaleTaskRecovery`: re-queues the tasks of workers gone quiet, every heartbeat interval,
  whatever the worker is doing;
- `SweeperThread`: the memory sweep and the retention pass under the sweep lease, so no
  round waits for a memory model.

Each survives a database outage with one warning and resumes when the database returns
(`worker.faults.Outage`).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from django.db import connection

from controlplane.logging import context_thread
from worker import faults, processes, services

if TYPE_CHECKING:
    from worker.executors import ExecutionControl

# The worker's log lines keep one logger name, whichever thread writes them.
logger = logging.getLogger("worker.loop")


class RecoveringWorker(Protocol):
    """What stale-task recovery needs of its worker (`worker.loop.Worker`)."""

    worker_id: str

    def recover_stale(self) -> list[int]: ...


class Heartbeat:
    """Refreshes a task's heartbeat from its own thread (and its own DB connection).

    If the task is no longer ours (it was recovered after a stall), the running execution
    is cancelled: someone else owns the task now. Every `progress_seconds` (0: never) it logs
    that the task is still running, so a long turn shows in the logs before it ends.
    """

    def __init__(
        self,
        *,
        task_id: int,
        worker_id: str,
        interval: float,
        control: ExecutionControl,
        progress_seconds: float = 0,
        turn: int | None = None,
        claimed_at: datetime | None = None,
    ) -> None:
        self.task_id = task_id
        self.worker_id = worker_id
        self.claimed_at = claimed_at
        self.interval = interval
        self.control = control
        self.progress_seconds = progress_seconds
        self.turn = turn
        self.lost = False
        self._stop = threading.Event()
        self._thread = context_thread(target=self._run, name=f"heartbeat-task-{task_id}")

    def __enter__(self) -> Heartbeat:
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        started = last_progress = time.monotonic()
        outage = faults.Outage(f"heartbeat of task {self.task_id}", logger=logger)
        try:
            while not self._stop.wait(self.interval):
                now = time.monotonic()
                if self.progress_seconds > 0 and now - last_progress >= self.progress_seconds:
                    last_progress = now
                    logger.info(
                        "task %s turn %s still running after %.0fs",
                        self.task_id,
                        self.turn,
                        now - started,
                    )
                faults.refresh_connections()  # a broken connection is replaced
                try:
                    owned = services.task_heartbeat(
                        task_id=self.task_id, worker_id=self.worker_id, claimed_at=self.claimed_at
                    )
                except Exception as exc:
                    outage.failed(exc)
                    continue
                outage.ok()
                if not owned:
                    logger.warning(
                        "task %s is no longer held by %s; stopping its execution",
                        self.task_id,
                        self.worker_id,
                    )
                    self.lost = True
                    self.control.cancel()
                    return
        finally:
            connection.close()  # this thread's own connection


class StaleTaskRecovery:
    """Re-queues stale tasks (any worker's) every `interval` from its own thread and connection.

    It runs for the worker's whole life, so the task of a dead worker is found within
    `WORKER_STALE_AFTER_SECONDS` + one interval even while every live worker is busy in a long
    turn or an end-of-round sweep. Several workers recovering at once is safe: each task is
    taken back by a conditional update. Each pass also refreshes the worker's `last_seen_at`.
    """

    def __init__(self, *, worker: RecoveringWorker, interval: float) -> None:
        self.worker = worker
        self.interval = interval
        self._stop = threading.Event()
        self._thread = context_thread(target=self._run, name=f"recovery-{worker.worker_id}")

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        outage = faults.Outage("stale task recovery", logger=logger)
        try:
            while not self._stop.wait(self.interval):
                faults.refresh_connections()  # a broken or expired connection is replaced
                try:
                    self.worker.recover_stale()  # logs each task it re-queues
                    processes.worker_seen(worker_id=self.worker.worker_id)
                except Exception as exc:
                    outage.failed(exc)
                    continue
                outage.ok()
        finally:
            connection.close()  # this thread's own connection


class SweeperThread:
    """Runs the memory sweeper's turns (`GlobalSweeper.run`) every `interval` from its own
    thread and connection, for the worker's whole life; a failed turn is logged and the
    next one tried. On stop it asks a running sweep to leave its remaining tasks, waits a
    little for it, and lets go of the lease."""

    def __init__(self, *, sweeper, interval: float, join_seconds: float = 30.0) -> None:
        self.sweeper = sweeper
        self.interval = interval
        self.join_seconds = join_seconds
        self._stop = threading.Event()
        self._thread = context_thread(target=self._run, name="memory-sweeper")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.sweeper.stop()
        if self._thread.is_alive():
            self._thread.join(self.join_seconds)
        if self._thread.is_alive():
            logger.warning("memory sweep still running after %.0fs; leaving it", self.join_seconds)
            return
        try:
            self.sweeper.release()
        except Exception:
            logger.warning("could not release the sweep lease; it expires", exc_info=True)

    def _run(self) -> None:
        outage = faults.Outage("memory sweep", logger=logger)
        try:
            while not self._stop.is_set():
                faults.refresh_connections()  # a broken or expired connection is replaced
                try:
                    self.sweeper.run()  # logs what it did
                except Exception as exc:
                    if faults.is_connection_error(exc):
                        outage.failed(exc, retrying="retrying after the interval")
                    else:
                        logger.exception("memory sweep failed; retrying after the interval")
                else:
                    outage.ok()
                self._stop.wait(self.interval)
        finally:
            connection.close()  # this thread's own connection
