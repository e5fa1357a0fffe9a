"""What the worker loop says it did: one turn (`RunReport`) and one round (`RoundReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunReport:
    task_id: int
    turn: int
    outcome: str  # completed | failed | refused | requeued | discarded | unrecorded
    seconds: float
    reason: str = ""


@dataclass
class RoundReport:
    recovered: list[int] = field(default_factory=list)
    runs: list[RunReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def did_work(self) -> bool:
        return bool(self.runs or self.recovered)
