"""Model prices: the one price table type, for the agents' runs and auto memory's model calls.

A table maps a model name to its rates in USD per 1M tokens, with a `default` entry for any
model it does not name:

    {"default": {"input": "1.25", "cached_input": "0.125", "output": "10.00"}, ...}

Cached input and cache writes are parts of the input tokens, billed at the `cached_input` and
`cache_write` rates (each defaulting to `input`); reasoning tokens are a part of the output
tokens and are not billed again. Costs are rounded to a millionth of a dollar.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

logger = logging.getLogger(__name__)

RATES = ("input", "cached_input", "cache_write", "output")
REQUIRED_RATES = ("input", "output")
ONE_MILLION = Decimal(1_000_000)
COST_QUANTUM = Decimal("0.000001")
EXAMPLE = '{"default": {"input": "1.25", "cached_input": "0.125", "output": "10.00"}}'


class PriceTable:
    """A validated-on-demand price table (`problems()`), read by `cost_usd()`.

    `name` is the setting the table comes from, for messages.
    """

    def __init__(self, table: Mapping[str, Any] | None, *, name: str) -> None:
        self.table = table if isinstance(table, Mapping) else {}
        self.raw = table
        self.name = name

    def rates_for(self, model: str) -> Mapping[str, Any] | None:
        """The rates of `model`, else the `default` entry's; None when neither exists."""
        rates = self.table.get(model) or self.table.get("default")
        return rates if isinstance(rates, Mapping) else None

    def cost_usd(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int = 0,
        cache_write_input_tokens: int = 0,
    ) -> Decimal:
        """USD for one call's tokens at this table's rates (0, with a warning, when the model
        has no price and the table no default)."""
        rates = self.rates_for(model)
        if rates is None:
            logger.warning("%s has no price for model %r and no default: cost counted as 0",
                           self.name, model)  # fmt: skip
            return Decimal("0")

        def rate(name: str) -> Decimal:
            if name in rates:
                return Decimal(str(rates[name]))
            return rate("input") if name in ("cached_input", "cache_write") else Decimal(0)

        cached = min(max(cached_input_tokens, 0), input_tokens)
        cache_write = min(max(cache_write_input_tokens, 0), input_tokens - cached)
        uncached = input_tokens - cached - cache_write
        cost = (
            Decimal(uncached) * rate("input")
            + Decimal(cached) * rate("cached_input")
            + Decimal(cache_write) * rate("cache_write")
            + Decimal(output_tokens) * rate("output")
        ) / ONE_MILLION
        return cost.quantize(COST_QUANTUM)

    def problems(self, *, require_default: bool = True) -> list[str]:
        """What is wrong with the table, one message per problem (empty: it is usable).

        A malformed table bills at a wrong rate (a missing or misspelt rate counts as 0).
        """
        if not isinstance(self.raw, Mapping):
            return [
                f"{self.name} must be a mapping of model name -> {{input, output[, cached_input"
                f", cache_write]}} USD per 1M tokens, e.g. {EXAMPLE}; not {self.raw!r}."
            ]
        problems = []
        if require_default and "default" not in self.raw:
            problems.append(
                f"{self.name} needs a 'default' entry, the price of a model missing from the "
                f"table, e.g. {EXAMPLE}."
            )
        for model, rates in self.raw.items():
            where = f"{self.name}[{model!r}]"
            if not isinstance(rates, Mapping):
                problems.append(f"{where} must be a mapping {{input, output, ...}}, not {rates!r}.")
                continue
            missing = [rate for rate in REQUIRED_RATES if rate not in rates]
            if missing:
                problems.append(f"{where} lacks {', '.join(missing)}.")
            unknown = sorted(str(rate) for rate in rates if rate not in RATES)
            if unknown:
                problems.append(
                    f"{where} has unknown rate(s) {', '.join(unknown)}; "
                    f"expected {', '.join(RATES)}."
                )
            for rate in RATES:
                if rate in rates and not _rate_valid(rates[rate]):
                    problems.append(
                        f"{where}[{rate!r}] must be a non-negative number of USD per 1M "
                        f"tokens, not {rates[rate]!r}."
                    )
        return problems


def _rate_valid(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return False
    try:
        rate = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return False
    return rate.is_finite() and rate >= 0
