"""uvicorn's HTTP/1.1 protocol with a deadline on a request's head (issue 37, slowloris).

uvicorn closes a keep-alive connection that stays idle (`timeout_keep_alive`), but any
byte cancels that timer and a fresh connection has none: a client that opens
connections and sends their request line a byte a minute holds them, and the server's
file descriptors, for ever. Here a request's head (request line and headers) must be
whole within `head_timeout` of the connection or of its first byte; otherwise the
connection is closed. Bodies are the body-size limit's business (`limits.py`).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def with_head_timeout(seconds: float) -> type[H11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)`."""

    class HeadDeadlineProtocol(H11Protocol):
        head_timeout = seconds
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # a head under way (or none yet)
                if self._head_deadline is None:
                    self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_deadline = self.loop.call_later(self.head_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineProtocol
