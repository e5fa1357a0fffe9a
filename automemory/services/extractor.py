"""Extraction: completed, idle tasks become project-level memories."""

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class SweepSummary:
    scanned: int = 0
    extracted: int = 0
    superseded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    errors: int = 0


def process_auto_memories(*, user=None, force: bool = False, now: datetime | None = None) -> SweepSummary:
    """Run one extraction sweep over completed tasks (of one user, or of everyone)."""
    raise NotImplementedError
