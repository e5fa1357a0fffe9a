"""Secret redaction for everything auto memory stores or logs.

``redact(text)`` replaces credentials with ``[REDACTED]`` and keeps the text around
them, so ``API_KEY=sk-...`` becomes ``API_KEY=[REDACTED]``.  The rules are data, one
module per family under ``rules/``, each with its own true- and false-positive samples;
``docs/redaction.md`` lists them and what is deliberately not caught.
``redacted_slice(text, end=n)`` redacts a piece of a long text without keeping part of a
secret its cut split: redact first, cut after.
"""

from automemory.services.redactor.base import REDACTED, Rule
from automemory.services.redactor.cut import marker_safe_end, redacted_slice
from automemory.services.redactor.decoders import DECODERS, Decoder
from automemory.services.redactor.engine import find_secrets, redact, secret_kinds
from automemory.services.redactor.rules import RULES

__all__ = [
    "DECODERS",
    "REDACTED",
    "RULES",
    "Decoder",
    "Rule",
    "find_secrets",
    "marker_safe_end",
    "redact",
    "redacted_slice",
    "secret_kinds",
]
