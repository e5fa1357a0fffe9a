"""A codex turn's own token usage and its price; a turn's usage is never the thread's.

The CLI's session files count the thread's tokens (`session_totals_read`); read before and
after a run, they tell exactly what the run used. Without them the `turn.completed` report is
read as `WORKER_CODEX_RESUME_USAGE` says (see `turn_usage` and docs/codex.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from controlplane.pricing import PriceTable
from worker.codex.session_files import session_files
from worker.codex.stream import json_object, token_usage_parse
from worker.executors.base import TokenUsage

logger = logging.getLogger(__name__)

# How `turn.completed.usage` of an `exec resume` run is read when the CLI's session files
# cannot be: the whole thread so far (codex 0.171.0), this turn only, or decided per run.
RESUME_USAGE_MODES = ("cumulative", "per_turn", "auto")


def usage_price(*, usage: TokenUsage, model: str, prices: dict[str, Any]) -> Decimal:
    """USD for `usage` at the `prices` table (`controlplane.pricing.PriceTable`)."""
    return PriceTable(prices, name="WORKER_CODEX_PRICES").cost_usd(
        model=model,
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        cache_write_input_tokens=usage.cache_write_input_tokens,
        output_tokens=usage.output_tokens,
    )


@dataclass(frozen=True)
class SessionTotals:
    """What the CLI's session file says about a thread: its token total and the last model."""

    total: TokenUsage
    model: str


def session_totals_read(*, thread_id: str, home: Path) -> SessionTotals | None:
    """The thread's total usage as the CLI counted it (`token_count.total_token_usage`), read
    from its latest session file under `home` (the last by name when there are several).

    None when there is no readable file (another machine's thread, a different CLI).
    """
    files = session_files(thread_id=thread_id, home=home)
    if not files:
        return None
    path = files[-1]
    total: TokenUsage | None = None
    model = ""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if '"token_count"' in line:
                    info = (json_object(line).get("payload") or {}).get("info")
                    if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
                        total = token_usage_parse(info["total_token_usage"])
                elif '"turn_context"' in line:
                    payload = json_object(line).get("payload")
                    if isinstance(payload, dict) and isinstance(payload.get("model"), str):
                        model = payload["model"]
    except OSError:
        logger.warning("codex: could not read the session file %s", path, exc_info=True)
        return None
    return SessionTotals(total=total or TokenUsage(), model=model)


@dataclass(frozen=True)
class UsageDecision:
    """This turn's own usage and how it was told apart from the thread's."""

    usage: TokenUsage
    source: str  # session_file | fresh_thread | per_turn | cumulative | unknown_previous


def turn_usage(
    *,
    reported: TokenUsage,
    resumed: bool,
    session_before: TokenUsage | None,
    session_after: TokenUsage | None,
    thread_usage: TokenUsage | None,
    mode: str,
) -> UsageDecision:
    """This turn's own usage, whatever the CLI reports on `turn.completed`.

    1. The thread's totals in the CLI's session file, read before and after the run, count
       exactly what this run used (after - before; before is zero for a new thread),
       including model requests of a run that fails before `turn.completed`. When the
       ledger's total for the thread (`thread_usage`) is below the file's total before the
       run, an earlier run spent tokens no run was billed for (it was killed, or its result
       discarded): they are billed now, so the thread costs what the CLI counted, once.
    2. Without it, a run that started a new thread reports its own usage.
    3. A resumed thread: `per_turn` takes the report as it is; `cumulative` subtracts the
       thread's previous total recorded in the ledger (`thread_usage`, floored at 0 per
       count); `auto` (and an unknown mode) subtracts it when the report covers it and takes
       the report as per-turn when it does not. With no recorded total the whole report is
       billed, an upper bound (a warning is logged): under-billing would let a user run past
       their quota.
    """
    if session_after is not None and (session_before is not None or not resumed):
        billed = session_before or TokenUsage()
        if resumed and thread_usage is not None and billed.covers(thread_usage):
            billed = thread_usage
        own = session_after - billed
        this_run = session_after - (session_before or TokenUsage())
        if not reported.is_zero and reported not in (this_run, session_after):
            logger.warning(
                "codex: turn.completed usage %s matches neither this run (%s) nor the thread "
                "(%s) in the session file; the session file is used",
                reported,
                this_run,
                session_after,
            )
        return UsageDecision(own, "session_file")
    if not resumed:
        return UsageDecision(reported, "fresh_thread")
    if mode == "per_turn":
        return UsageDecision(reported, "per_turn")
    if thread_usage is None:
        logger.warning(
            "codex: a resumed thread with no recorded earlier usage; the reported usage %s is "
            "billed whole (WORKER_CODEX_RESUME_USAGE=%s)",
            reported,
            mode,
        )
        return UsageDecision(reported, "unknown_previous")
    if reported.covers(thread_usage):
        return UsageDecision(reported - thread_usage, "cumulative")
    if mode == "cumulative":
        logger.warning(
            "codex: reported thread usage %s is below the recorded total %s; this turn is "
            "billed the difference, floored at 0 per count",
            reported,
            thread_usage,
        )
        return UsageDecision(reported - thread_usage, "cumulative")
    return UsageDecision(reported, "per_turn")
