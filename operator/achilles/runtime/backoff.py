"""The per-object exponential backoff of a failed handling, as client-go's
ItemExponentialFailureRateLimiter: 1 s after the first failure, doubling to 60 s."""

from __future__ import annotations

FIRST_DELAY = 1.0
MOST_DELAY = 60.0


def delay(failures: int) -> float:
    """Seconds to wait after the `failures`-th failure in a row (1, 2, 4, ... 60)."""
    return min(MOST_DELAY, FIRST_DELAY * 2.0 ** (failures - 1))
