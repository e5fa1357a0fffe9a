"""The redactor must finish in bounded time on hostile 100 kB inputs.

Each input runs in a subprocess with a hard timeout, so catastrophic backtracking makes
the test fail instead of hanging the suite.  The bound is deliberately generous (5 s for
what takes milliseconds): this is a safety net, not a benchmark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.automemory.redactor.adversarial import ADVERSARIAL

ROOT = Path(__file__).resolve().parents[3]
SIZE = 100_000
LIMIT_S = 5.0

_CHILD = """
import json, sys, time
from automemory.services.redactor import redact
from tests.automemory.redactor.adversarial import ADVERSARIAL
text = ADVERSARIAL[sys.argv[1]](int(sys.argv[2]))
start = time.perf_counter()
out = redact(text)
print(json.dumps({"seconds": time.perf_counter() - start, "len": len(text), "out": len(out)}))
"""


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_input_finishes_in_bounded_time(name: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(SIZE)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"redact() did not finish within 60 s on {name!r}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["len"] >= SIZE * 0.9
    assert result["seconds"] < LIMIT_S, f"{name}: {result['seconds']:.2f}s"
