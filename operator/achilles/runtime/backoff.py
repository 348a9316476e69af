"""The exponential backoff of a failure, as client-go's ItemExponentialFailureRateLimiter:
`first` seconds after the first failure in a row, doubling to `most`.

A workqueue's failed key waits out `delay` (1 s doubling to 60 s, runtime/workqueue.py);
a loop's failed pass waits out its controller's `Backoff` (runtime/manager.py,
`LoopHandle.drive`), declared with the controller in the manager's table.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_DELAY = 1.0
MOST_DELAY = 60.0


def delay(failures: int, first: float = FIRST_DELAY, most: float = MOST_DELAY) -> float:
    """Seconds to wait after the `failures`-th failure in a row (1, 2, 4, ... 60)."""
    return min(most, first * 2.0 ** (failures - 1))


@dataclass(frozen=True)
class Backoff:
    """A rate limiter's policy: `first` seconds after the first failure, doubling to
    `most`."""

    first: float = FIRST_DELAY
    most: float = MOST_DELAY

    def delay(self, failures: int) -> float:
        return delay(failures, self.first, self.most)

    def __str__(self) -> str:
        return f"{self.first:g} s doubling to {self.most:g} s"
