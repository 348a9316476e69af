"""A run's MCP sessions: one open session per server, kept for the run's calls.

Opening a session costs a round trip or two (and, behind a stdio gateway such as
supergateway, a process start: seconds); a run's calls of one server reuse one session
instead (`achilles bench tools` measures both). The sessions live on one event loop in a
thread of their own, each served by one task that entered the SDK client's context and
takes the calls in order, so the SDK's task groups are entered and left where anyio wants
them. A call that fails at the transport (the server went away, a timeout) closes its
session; the next call opens a new one. `close` ends every session (the server learns it
with the transport's DELETE) and the thread.

Headers carry credentials: they go to the server only, never to a log line or message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from achilles.mcp_client.client import (
    CallOutcome,
    McpEndpoint,
    McpUnreachable,
    result_text,
    unreachable,
)

log = logging.getLogger(__name__)

# How long closing a session may take (the transport's DELETE) before it is abandoned.
CLOSE_TIMEOUT = 5.0


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    done: concurrent.futures.Future[CallOutcome] = field(default_factory=concurrent.futures.Future)


class _Session:
    """One server's session, served by one task on the sessions' loop."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint
        self.calls: asyncio.Queue[_Call | None] = asyncio.Queue()
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        endpoint = self.endpoint
        try:
            http = create_mcp_http_client(
                headers=dict(endpoint.headers), timeout=httpx2.Timeout(endpoint.timeout_seconds)
            )
            async with http:
                transport = streamable_http_client(endpoint.url, http_client=http)
                async with asyncio.timeout(endpoint.timeout_seconds):
                    client = await Client(
                        transport, read_timeout_seconds=endpoint.timeout_seconds, cache=None
                    ).__aenter__()
                try:
                    self.open.set_result(None)
                    await self._take_calls(client)
                finally:
                    await client.__aexit__(None, None, None)
        except BaseException as exc:
            self.closed = True
            if not self.open.done():
                self.open.set_exception(exc)
            self._fail_waiting(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.closed = True

    async def _take_calls(self, client: Client) -> None:
        while True:
            call = await self.calls.get()
            if call is None:
                return
            try:
                async with asyncio.timeout(self.endpoint.timeout_seconds):
                    result = await client.call_tool(call.name, call.arguments)
            except Exception as exc:
                call.done.set_exception(exc)
                return  # the session may be in any state: a new one for the next call
            call.done.set_result(CallOutcome(text=result_text(result), is_error=result.is_error))

    def _fail_waiting(self, exc: BaseException) -> None:
        while not self.calls.empty():
            call = self.calls.get_nowait()
            if call is not None and not call.done.done():
                call.done.set_exception(exc)


class McpSessions:
    """A run's sessions, keyed by server (URL and headers)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="mcp-sessions", daemon=True
        )
        self._thread.start()
        self._sessions: dict[tuple[str, tuple[tuple[str, str], ...]], _Session] = {}
        self._lock = threading.Lock()
        self.opened = 0  # sessions opened so far (for the benchmark and the tests)

    def call_tool(self, endpoint: McpEndpoint, name: str, arguments: dict[str, Any]) -> CallOutcome:
        """One call on the server's open session (opened first if need be)."""
        try:
            session = self._session(endpoint)
            call = _Call(name, arguments)
            self._loop.call_soon_threadsafe(session.calls.put_nowait, call)
            return call.done.result(timeout=endpoint.timeout_seconds + CLOSE_TIMEOUT)
        except concurrent.futures.TimeoutError as exc:
            raise unreachable(endpoint, TimeoutError()) from exc
        except McpUnreachable:
            raise
        except Exception as exc:
            raise unreachable(endpoint, exc) from exc

    def _session(self, endpoint: McpEndpoint) -> _Session:
        key = (endpoint.url, tuple(sorted(endpoint.headers.items())))
        with self._lock:
            session = self._sessions.get(key)
            if session is not None and not session.closed:
                return session

            async def start() -> _Session:
                started = _Session(endpoint)
                await started.open
                return started

            future = asyncio.run_coroutine_threadsafe(start(), self._loop)
            session = future.result(timeout=endpoint.timeout_seconds + CLOSE_TIMEOUT)
            self._sessions[key] = session
            self.opened += 1
            return session

    def close(self) -> None:
        """End every session, then the loop's thread."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()

        async def end(sessions: list[_Session]) -> None:
            for session in sessions:
                if not session.closed:
                    session.calls.put_nowait(None)
            if sessions:
                await asyncio.wait([session.task for session in sessions], timeout=CLOSE_TIMEOUT)

        if not self._loop.is_running():
            return
        try:
            ending = asyncio.run_coroutine_threadsafe(end(sessions), self._loop)
            ending.result(timeout=CLOSE_TIMEOUT + 1)
        except Exception as exc:  # the server expires what it keeps; the run is over
            log.warning("closing the MCP sessions: %s", type(exc).__name__)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT)
