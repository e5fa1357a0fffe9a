#!/usr/bin/env python
"""What the agents' sandbox costs per task: starting an agent in bubblewrap, on the host's
network or on an isolated one (with the in-sandbox bridge to the egress door), against
starting it as a plain child process, with the allow-listed environment in every case.

Prints, for `true` (the bare start-up), `python -I -c pass` (an interpreter like the memory
relay) and one whole `command` executor turn (the task's room, the environment, the agent
reading its prompt and answering), the median and best milliseconds with WORKER_SANDBOX=none,
=bwrap with WORKER_SANDBOX_NETWORK=host and =bwrap with the default isolated network, and
what each sandbox adds over none. Run alternately, so the machine's noise falls on all alike.

    .venv/bin/python benchmarks/bench_sandbox.py [--repeats 41] [--save]
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time

import harness


def main() -> None:
    arguments = harness.parser(__doc__, database=False)
    arguments.add_argument("--repeats", type=int, default=41)
    args = arguments.parse_args()
    with harness.run(args, database=False):
        from django.conf import settings
        from django.test.utils import override_settings

        from worker import sandbox
        from worker.executors import ExecutionControl, ExecutionRequest
        from worker.executors.command import CommandExecutor

        problem = sandbox.bwrap_problem(settings.WORKER_SANDBOX_BINARY)
        if problem:
            sys.exit(f"bubblewrap cannot run here: {problem}")
        root = tempfile.mkdtemp(prefix="bench-sandbox-")
        agent = shlex.join([sys.executable, "-I", "-c", "import sys; print(sys.stdin.read())"])

        def start(argv: list[str]):
            def call() -> None:
                room = sandbox.task_room(task_id=1)
                env = sandbox.agent_env(room=room)
                command = sandbox.sandboxed(argv, room=room, programs=argv[:1])
                subprocess.run(command, env=env, cwd=room.work, check=True, capture_output=True)

            return call

        def turn() -> None:
            request = ExecutionRequest(task_id=2, project_id=1, user_id=1, prompt="hello")
            result = CommandExecutor().execute(request, control=ExecutionControl())
            assert result.status == "completed", result.failure_reason

        cases = {
            "start `true`": start(["true"]),
            "start `python -I -c pass`": start([sys.executable, "-I", "-c", "pass"]),
            "one command-executor turn": turn,
        }
        modes = {
            "none": {"WORKER_SANDBOX": "none"},
            "bwrap, host net": {"WORKER_SANDBOX": "bwrap", "WORKER_SANDBOX_NETWORK": "host"},
            "bwrap, isolated": {"WORKER_SANDBOX": "bwrap", "WORKER_SANDBOX_NETWORK": "isolated"},
        }
        print(f"{args.repeats} runs each, alternating; milliseconds, median (best)")
        print(f"{'':28}" + "".join(f"{mode:>18}" for mode in modes) + f"{'added':>16}")
        for label, call in cases.items():
            times: dict[str, list[float]] = {mode: [] for mode in modes}
            for index in range(args.repeats + 1):
                for mode, overrides in modes.items():
                    with override_settings(
                        **overrides, WORKER_TASK_ROOT=root, WORKER_COMMAND=agent
                    ):
                        started = time.perf_counter()
                        call()
                        if index:  # the first round warms up
                            times[mode].append((time.perf_counter() - started) * 1000)
            stats = {mode: _stats(values) for mode, values in times.items()}
            base = stats["none"][0]
            cells = "".join(f"{median:9.1f} ({best:5.1f})" for median, best in stats.values())
            added = " ".join(f"{median - base:+7.1f}" for median, _ in list(stats.values())[1:])
            print(f"{label:28}{cells}  {added}")


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[0]


if __name__ == "__main__":
    main()
