"""Sources that must have been listed once before another part starts: client-go's
`WaitForCacheSync`, which a controller calls before its workers take anything, for the
informers its reconcile reads."""

from __future__ import annotations

import threading
from collections.abc import Iterable


class Synced:
    """Names (a listed kind, say) each marked once when its first listing is handled;
    `wait` returns once every one is. Thread-safe."""

    def __init__(self, names: Iterable[str]) -> None:
        self._pending = set(names)
        self._changed = threading.Condition()

    def mark(self, name: str) -> None:
        with self._changed:
            self._pending.discard(name)
            if not self._pending:
                self._changed.notify_all()

    def pending(self) -> frozenset[str]:
        with self._changed:
            return frozenset(self._pending)

    def wait(self, timeout: float) -> bool:
        """Whether every name was marked within `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending, timeout)
