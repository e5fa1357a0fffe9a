"""The rule table, one module per family.

Order matters only for naming: when findings of several rules cover the same span, the
merged finding is named after the rule listed first, so specific rules (a GitHub token)
come before generic ones (a token assignment).
"""

from automemory.services.redactor.base import Rule
from automemory.services.redactor.rules import (
    commandline,
    keyvalue,
    keyworded,
    providers,
    services,
    structured,
)

RULES: tuple[Rule, ...] = (
    providers.RULES
    + services.RULES
    + keyworded.RULES
    + structured.RULES
    + keyvalue.RULES
    + commandline.RULES
    + commandline.PROSE_RULES
)

__all__ = ["RULES"]
