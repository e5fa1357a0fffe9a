"""A codex turn's own usage and its price (`worker.codex.usage`), without running the CLI."""

import json
from decimal import Decimal

import pytest

from worker.codex.usage import session_totals_read, turn_usage, usage_price
from worker.executors.base import TokenUsage

PRICES = {"default": {"input": "2", "cached_input": "0.5", "output": "8"}}


@pytest.mark.parametrize(
    ("usage", "model", "expected"),
    [
        (TokenUsage(input_tokens=1_000_000), "gpt-x", Decimal("2.000000")),
        (TokenUsage(input_tokens=10**6, cached_input_tokens=10**6), "gpt-x", Decimal("0.5")),
        # cache writes at their own rate; without one, at the input rate
        (TokenUsage(input_tokens=10**6, cache_write_input_tokens=10**6), "cw", Decimal("2.5")),
        (TokenUsage(input_tokens=10**6, cache_write_input_tokens=10**6), "gpt-x", Decimal("2")),
        # reasoning tokens are a part of output tokens: billed once
        (TokenUsage(output_tokens=1_000, reasoning_output_tokens=600), "gpt-x", Decimal("0.008")),
        (TokenUsage(input_tokens=1_000_000), "cheap", Decimal("0.100000")),
        # counts that claim more cached than input are capped at the input
        (TokenUsage(input_tokens=100, cached_input_tokens=500), "gpt-x", Decimal("0.000050")),
    ],
)
def test_usage_is_priced_per_million_tokens(usage, model, expected):
    prices = {
        **PRICES,
        "cheap": {"input": "0.1", "cached_input": "0.01", "output": "0.4"},
        "cw": {"input": "2", "cached_input": "0.5", "cache_write": "2.5", "output": "8"},
    }
    assert usage_price(usage=usage, model=model, prices=prices) == expected


def test_input_cached_and_cache_writes_are_priced_apart():
    usage = TokenUsage(
        input_tokens=1_000_000,
        cached_input_tokens=500_000,
        cache_write_input_tokens=200_000,
        output_tokens=10_000,
        reasoning_output_tokens=4_000,
    )
    prices = {"default": {"input": "2", "cached_input": "0.5", "cache_write": "3", "output": "8"}}
    # 300k at $2 + 500k at $0.50 + 200k at $3 + 10k at $8, per million
    assert usage_price(usage=usage, model="", prices=prices) == Decimal("1.530000")


def test_no_price_at_all_counts_zero():
    usage = TokenUsage(input_tokens=10, output_tokens=10)
    assert usage_price(usage=usage, model="x", prices={}) == Decimal("0")


@pytest.mark.parametrize(
    ("fields", "expected", "source"),
    [
        # a new thread reports its own usage
        ({"resumed": False}, TokenUsage(30, 10, 0, 3, 1), "fresh_thread"),
        ({"mode": "per_turn"}, TokenUsage(30, 10, 0, 3, 1), "per_turn"),
        ({}, TokenUsage(20, 6, 0, 2, 1), "cumulative"),
        ({"thread_usage": None}, TokenUsage(30, 10, 0, 3, 1), "unknown_previous"),
        # a report below the recorded total: floored per count, or per-turn under auto
        ({"thread_usage": TokenUsage(40, 4, 0, 1, 0)}, TokenUsage(0, 6, 0, 2, 1), "cumulative"),
        (
            {"thread_usage": TokenUsage(40, 4, 0, 1, 0), "mode": "auto"},
            TokenUsage(30, 10, 0, 3, 1),
            "per_turn",
        ),
        # the session file wins over the report
        (
            {
                "session_before": TokenUsage(25, 9, 0, 2, 0),
                "session_after": TokenUsage(30, 10),
                "thread_usage": TokenUsage(99),  # more than the file: the file decides
            },
            TokenUsage(5, 1, 0, 0, 0),
            "session_file",
        ),
        # ... and what it counted before this run that no recorded run billed is billed now
        (
            {
                "session_before": TokenUsage(25, 9, 0, 2, 0),
                "session_after": TokenUsage(30, 10, 0, 3, 0),
            },
            TokenUsage(20, 6, 0, 2, 0),
            "session_file",
        ),
        (
            {
                "session_before": TokenUsage(25, 9, 0, 2, 0),
                "session_after": TokenUsage(30, 10, 0, 3, 0),
                "thread_usage": None,
            },
            TokenUsage(5, 1, 0, 1, 0),
            "session_file",
        ),
        (
            {"resumed": False, "session_after": TokenUsage(7, 0, 0, 1, 0)},
            TokenUsage(7, 0, 0, 1, 0),
            "session_file",
        ),
        # a file after the run but none before a resume: not trusted
        ({"session_after": TokenUsage(99)}, TokenUsage(20, 6, 0, 2, 1), "cumulative"),
    ],
)
def test_turn_usage_rules(fields, expected, source):
    values = {
        "reported": TokenUsage(30, 10, 0, 3, 1),
        "resumed": True,
        "session_before": None,
        "session_after": None,
        "thread_usage": TokenUsage(10, 4, 0, 1, 0),
        "mode": "cumulative",
    }
    decision = turn_usage(**{**values, **fields})
    assert (decision.usage, decision.source) == (expected, source)


def test_session_totals_are_looked_up_only_for_a_plain_thread_id(tmp_path):
    sessions = tmp_path / "sessions" / "2026" / "11" / "30"
    sessions.mkdir(parents=True)
    (sessions / "rollout-2026-11-30T00-00-00-abc.jsonl").write_text(
        '{"type":"event_msg","payload":{"type":"token_count","info":null}}\n'
        "not json\n"
        '{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":'
        '{"input_tokens":5,"output_tokens":2}}}}\n'
    )
    assert session_totals_read(thread_id="abc", home=tmp_path).total == TokenUsage(5, 0, 0, 2, 0)
    assert session_totals_read(thread_id="*", home=tmp_path) is None
    assert session_totals_read(thread_id="../abc", home=tmp_path) is None
    assert session_totals_read(thread_id="other", home=tmp_path) is None


def test_a_uuid7_thread_s_session_file_is_found_in_its_creation_day_folder(tmp_path):
    thread = "01a22d31-d416-7111-9d9a-790d41bbe1a2"  # created 2026-11-30T16:02:50Z
    for day in ("2026/11/30", "2026/12/25"):
        folder = tmp_path / "sessions" / day
        folder.mkdir(parents=True)
        info = {"total_token_usage": {"input_tokens": int(day[-2:])}}
        count = {"type": "event_msg", "payload": {"type": "token_count", "info": info}}
        (folder / f"rollout-x-{thread}.jsonl").write_text(json.dumps(count) + "\n")
    # the creation day's file wins over any other folder's
    assert session_totals_read(thread_id=thread, home=tmp_path).total == TokenUsage(30)
