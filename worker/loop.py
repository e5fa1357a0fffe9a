"""The worker loop: a plain class whose steps are methods tests call directly.

A round: recover stale tasks, then claim and run tasks (at most `round_max_tasks`, until the
queue is empty or a stop is asked). The loop holds no business rules: claiming, quota,
finishing, recovery and the memory sweep are services. This module is the worker's life
(start, rounds, the sweeper, signals, stop); one claimed task's turn is `worker.turn_steps`,
its git checkout `worker.workspace_steps`, the background threads `worker.threads`.

Two background threads (`worker/threads.py`) run beside the rounds, each on its own
database connection: stale task recovery (every heartbeat interval, whatever the worker is
doing) and the memory sweeper (every `AUTOMEMORY_SWEEP_INTERVAL_SECONDS`: the extraction
sweep and the retention pass, under a lease, so one worker of many sweeps; the others spend
one statement a try).
No round waits for a memory model. `role` chooses what a process does: `all` (tasks and the
sweeper), `tasks`, or `sweeper`. Every line logged while the worker runs carries its id,
and the task's id while it handles one (`controlplane.logging.log_context`).

Signals (installed by `run_worker`): the first SIGINT/SIGTERM lets the task in hand finish
(and the sweep leave its remaining tasks) and then exits; the second kills the executor's
subprocess, re-queues the task as a resume of the same turn and exits at once.

New code (`worker.code_signature`): between tasks and sweeps a worker whose code changed on
disk leaves as after a first signal, with `code_changed` set (`run_worker` then exits 75).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from automemory import conf as automemory_conf
from automemory.services.extraction.sweep import GlobalSweeper
from controlplane.logging import log_context
from worker import faults, processes, services
from worker.code_signature import CodeSignature, CodeSigner, CodeWatch
from worker.executors import ExecutionControl, Executor
from worker.reports import RoundReport
from worker.threads import StaleTaskRecovery, SweeperThread
from worker.turn_steps import TurnSteps
from worker.workspace_steps import WorkspaceSteps

logger = logging.getLogger(__name__)


ROLES = ("all", "tasks", "sweeper")
# How long `run_once` waits for the sweep lease while another worker sweeps.
ONCE_SWEEP_WAIT_SECONDS = 30.0
# A worker that starts while the database is unreachable retries its registration this often:
# the first pause, doubling (with jitter) up to the last, until it is back or a signal.
STARTUP_RETRY_FIRST_SECONDS = 1.0
STARTUP_RETRY_MAX_SECONDS = 30.0


class WorkerAbort(BaseException):
    """Raised by the second signal during an inline sweep (`run_once`): leave now."""


class Worker(TurnSteps):
    """A worker process: its rounds, its background threads and its signals."""

    def __init__(
        self,
        *,
        executor: Executor,
        worker_id: str | None = None,
        poll_interval: float | None = None,
        heartbeat_seconds: float | None = None,
        stale_after_seconds: float | None = None,
        round_max_tasks: int | None = None,
        progress_log_seconds: float | None = None,
        finish_retry_seconds: float | None = None,
        sweeper=None,
        sweep_interval: float | None = None,
        role: str = "all",
        code_check_seconds: float | None = None,
        code_signer: CodeSigner | None = None,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        self.executor = executor
        self.worker_id = worker_id or services.worker_id_default()
        self.actor_label = services.worker_actor_label(worker_id=self.worker_id)
        self.poll_interval = _setting(poll_interval, "WORKER_POLL_INTERVAL_SECONDS")
        self.heartbeat_seconds = _setting(heartbeat_seconds, "WORKER_HEARTBEAT_SECONDS")
        self.stale_after = timedelta(
            seconds=_setting(stale_after_seconds, "WORKER_STALE_AFTER_SECONDS")
        )
        self.round_max_tasks = int(_setting(round_max_tasks, "WORKER_ROUND_MAX_TASKS"))
        self.progress_log_seconds = _setting(progress_log_seconds, "WORKER_PROGRESS_LOG_SECONDS")
        self.finish_retry_seconds = _setting(finish_retry_seconds, "WORKER_FINISH_RETRY_SECONDS")
        # The rounds' and the task steps' view of database outages (one warning per outage).
        self._outage = faults.Outage(f"worker {self.worker_id}", logger=logger)
        self.stopping = False  # first signal: finish the task in hand, then leave
        self.aborting = False  # second signal: stop the task in hand, re-queue it, leave
        self._control: ExecutionControl | None = None
        self._claimed_at: datetime | None = None
        self._in_hook = False
        self.role = role
        self.sweeper = sweeper or GlobalSweeper(holder=f"{self.actor_label} sweeper")
        self.sweep_interval = (
            automemory_conf.get("SWEEP_INTERVAL_SECONDS")
            if sweep_interval is None
            else sweep_interval
        )
        self._sweeper_thread: SweeperThread | None = None
        self._recovery: StaleTaskRecovery | None = None
        self._log_context = contextlib.ExitStack()
        self.workspaces = WorkspaceSteps(
            worker_id=self.worker_id,
            heartbeat_seconds=self.heartbeat_seconds,
            while_unreachable=self._while_unreachable,
        )
        self.code_watch = CodeWatch(
            interval=_setting(code_check_seconds, "WORKER_CODE_CHECK_SECONDS"),
            signer=code_signer,
            label=f"worker {self.worker_id}",
        )

    # --- Entry points -------------------------------------------------------------------------

    def run_forever(self) -> None:
        """Run rounds until a signal asks to stop; sleep `poll_interval` after an idle round.

        With role `sweeper`, only the sweeper runs (in this thread) until the stop.
        """
        if not self._started():
            return
        try:
            if self.role == "sweeper":
                while not self.stopping:
                    self.sweep_now()
                    self._sleep(self.sweep_interval, wake=self.code_check)
                return
            while not self.stopping:
                try:
                    report = self.run_round()
                except Exception as exc:
                    # A database outage, say (one warning for all of it; any other error
                    # with its traceback). The worker carries on.
                    if faults.is_connection_error(exc):
                        self._outage.failed(exc, retrying="retrying every second")
                    else:
                        logger.exception("round failed; retrying after the poll interval")
                    self._sleep(max(self.poll_interval, 1.0))
                    continue
                self._outage.ok()
                if not report.did_work:
                    self._sleep(self.poll_interval)
        except WorkerAbort:
            logger.warning("worker %s: stopped at once", self.worker_id)
        finally:
            self._stopped()

    def run_once(self) -> RoundReport:
        """Process every task queued when called (and nothing queued later), then one sweep
        (waiting a little while another worker sweeps; skipped when it keeps the lease)."""
        if not self._started(sweeper_thread=False):
            return RoundReport()
        try:
            report = RoundReport()
            if self.role != "sweeper":
                report = self.run_round(queued_before=timezone.now(), max_tasks=None)
            if not self.aborting and self.role != "tasks":
                self._in_hook = True
                try:
                    self.sweep_now(wait=ONCE_SWEEP_WAIT_SECONDS)
                finally:
                    self._in_hook = False
                    self.sweeper.release()
            return report
        except WorkerAbort:
            logger.warning("worker %s: stopped at once", self.worker_id)
            return RoundReport()
        finally:
            self._stopped()

    # --- Steps --------------------------------------------------------------------------------

    def run_round(
        self, *, queued_before: datetime | None = None, max_tasks: int | None = -1
    ) -> RoundReport:
        """Recover stale tasks, then run queued tasks; report what ran."""
        if max_tasks == -1:
            max_tasks = self.round_max_tasks
        started = time.monotonic()
        report = RoundReport()
        faults.refresh_connections()
        report.recovered = self.recover_stale()
        processes.worker_seen(worker_id=self.worker_id)
        self.workspaces_clean()
        while not self.stopping and (max_tasks is None or len(report.runs) < max_tasks):
            if self.code_check():
                break
            faults.refresh_connections()
            claim = self.claim_one(queued_before=queued_before)
            if claim is None:
                break
            report.runs.append(self.run_one(claim))
        report.seconds = time.monotonic() - started
        if report.did_work:
            outcomes: dict[str, int] = {}
            for run in report.runs:
                outcomes[run.outcome] = outcomes.get(run.outcome, 0) + 1
            logger.info(
                "round: %d tasks %s, %d recovered, %.2fs",
                len(report.runs),
                outcomes or "",
                len(report.recovered),
                report.seconds,
            )
        return report

    def recover_stale(self) -> list[int]:
        """Re-queue tasks whose worker stopped heart-beating; return their ids."""
        return services.tasks_recover_stale(
            stale_after=self.stale_after, actor_label=self.actor_label
        )

    def claim_one(self, *, queued_before: datetime | None = None) -> services.Claim | None:
        """The oldest queued task, now running under this worker, with its user's quota and
        its injection preferences; None if the queue is empty."""
        return services.task_claim_next(
            worker_id=self.worker_id, executor=self.executor.name, queued_before=queued_before
        )

    def workspaces_clean(self, *, force: bool = False) -> list[int]:
        """Remove this host's task checkouts that a killed worker left or that outlived
        WORKER_WORKTREE_KEEP_HOURS (`WorkspaceSteps.clean`)."""
        return self.workspaces.clean(force=force)

    def code_check(self) -> bool:
        """Between tasks: has the code changed (`CodeWatch.check`)? Then the worker stops as
        after a first signal: no more claims, the sweeper told to leave."""
        if self.code_watch.check() is None:
            return False
        self.stopping = True
        self.sweeper.stop()
        return True

    @property
    def code_changed(self) -> CodeSignature | None:
        """The new code's signature once it changed (`run_worker` then exits 75)."""
        return self.code_watch.changed

    def sweep_now(self, *, wait: float = 0) -> None:
        """One turn of the memory sweeper in this thread (the sweep and, when due, the
        retention pass), waiting up to `wait` seconds for the lease; a failure is logged and
        never stops the worker."""
        try:
            if self.sweeper.run(wait=wait) is None:
                logger.info("memory sweep skipped: another worker holds the sweep lease")
        except Exception:
            logger.exception("memory sweep failed")

    # --- Signals ------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.handle_signal)

    def handle_signal(self, signum: int, frame=None) -> None:
        name = signal.Signals(signum).name
        if not self.stopping:
            self.stopping = True
            self.sweeper.stop()
            logger.warning(
                "%s: finishing the task in hand, then exiting (send again to stop at once)", name
            )
            return
        self.aborting = True
        logger.warning("%s again: stopping at once", name)
        control = self._control
        if control is not None:
            control.cancel()  # run_one sees `aborting` and re-queues the task
        if self._in_hook:
            raise WorkerAbort  # leave the inline memory sweep; it commits task by task

    # --- Internals ----------------------------------------------------------------------------

    # --- Internals ----------------------------------------------------------------------------

    def _sleep(self, seconds: float, *, wake=None) -> None:
        """Sleep until `seconds` passed or a stop; `wake()` (if given) is asked every tick and
        ends the sleep when it returns True."""
        deadline = time.monotonic() + seconds
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0 or (wake is not None and wake()):
                return
            time.sleep(min(left, 0.1))

    def _started(self, *, sweeper_thread: bool = True) -> bool:
        """Register, start the background threads; False (nothing started) when a signal
        asked to stop while the database was still unreachable."""
        self._log_context.enter_context(log_context(worker_id=self.worker_id))
        self.code_watch.start()
        if not self._register():
            logger.info("worker %s stopped before the database was reachable", self.worker_id)
            self._log_context.close()
            return False
        logger.info(
            "worker %s started (executor %s, poll %.2gs)",
            self.worker_id,
            self.executor.name,
            self.poll_interval,
        )
        self.workspaces_clean(force=True)
        self._recovery = StaleTaskRecovery(worker=self, interval=self.heartbeat_seconds)
        self._recovery.start()
        if sweeper_thread and self.role == "all":
            self._sweeper_thread = SweeperThread(sweeper=self.sweeper, interval=self.sweep_interval)
            self._sweeper_thread.start()
        return True

    def _register(self) -> bool:
        """`worker_register`, waiting while the database is unreachable (a host's reboot, a
        failover, every worker of a deployment starting at once): one warning, retries from
        STARTUP_RETRY_FIRST_SECONDS doubling to STARTUP_RETRY_MAX_SECONDS, one line when it is
        back. False when a signal asked to stop meanwhile."""
        outage = faults.Outage(f"worker {self.worker_id} start-up", logger=logger)
        try:
            faults.retry_while_unreachable(
                lambda: processes.worker_register(
                    worker_id=self.worker_id,
                    executor=self.executor.name,
                    code_signature=self.code_watch.started.digest,
                ),
                outage=outage,
                seconds=float("inf"),
                should_stop=lambda: self.stopping,
                first_delay=STARTUP_RETRY_FIRST_SECONDS,
                max_delay=STARTUP_RETRY_MAX_SECONDS,
                retrying=f"waiting for it (retrying every {STARTUP_RETRY_FIRST_SECONDS:g}"
                f" to {STARTUP_RETRY_MAX_SECONDS:g}s)",
            )
        except faults.GaveUp:
            return False
        return True

    def _stopped(self) -> None:
        if self._sweeper_thread is not None:
            self._sweeper_thread.stop()
            self._sweeper_thread = None
        elif self.role == "sweeper":
            self.sweeper.release()
        if self._recovery is not None:
            self._recovery.stop()
            self._recovery = None
        try:
            processes.worker_stopped(worker_id=self.worker_id)
        except Exception:
            logger.warning("could not mark worker %s stopped", self.worker_id, exc_info=True)
        logger.info("worker %s stopped", self.worker_id)
        self._log_context.close()


def _setting(value, name: str):
    return getattr(settings, name) if value is None else value
