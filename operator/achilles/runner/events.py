"""What a run's main thread waits for, and the runner's exit codes.

Light on purpose: the process (`runner/main.py`) needs these before its claim, when
nothing of the agent loop's stack (openai, the tools) is imported yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from achilles.runner.loop import LoopResult

EXIT_OK = 0
EXIT_CRASH = 1


@dataclass(frozen=True)
class LoopFinished:
    """The agent loop ended; it already wrote `succeeded` or `failed` (or saw its row
    taken away)."""

    result: LoopResult


@dataclass(frozen=True)
class LoopCrashed:
    error: str


@dataclass(frozen=True)
class Terminated:
    """SIGTERM or SIGINT."""

    signal_name: str


@dataclass(frozen=True)
class RowLost:
    """A heartbeat was refused: the row is no longer `running`."""


Event = LoopFinished | LoopCrashed | Terminated | RowLost
