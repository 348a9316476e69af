"""Many Server-Sent Events clients in one event loop, and the NOTIFY -> LISTEN ceiling.

`achilles bench api` connects a thousand `GET /v1/events` streams to one API process.
httpx would spend a task, a parser and a buffer per stream on the benchmark's side of
the same two cores; a client here is one raw socket that sends the request, checks the
status line, and scans what arrives for the `item_id` of the events it waits for (an
event is `data: {"kind": "inbox_item", "item_id": N, "agent_id": M}`; the trailing comma
makes a number split between two reads unmatchable until it is whole). The time of an
event is when its bytes were read, on the same clock (`time.perf_counter`) as the
writer's commit.
"""

from __future__ import annotations

import asyncio
import queue
import re
import threading
import time
from dataclasses import dataclass, field

import psycopg

_ITEM = re.compile(rb'"item_id": (\d+),')
_READY = b"event: ready"
_TAIL = 64  # bytes kept between reads: longer than any partial match


class StreamRefused(RuntimeError):
    """The API did not answer 200 to an events request."""


@dataclass(eq=False)
class EventClient:
    """One events stream of `owner`; `seen` maps item ids to when their event arrived."""

    owner: str
    token: str
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    seen: dict[int, float] = field(default_factory=dict)
    waiters: dict[int, asyncio.Future[float]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    def expect(self, item_id: int) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[item_id] = future
        return future

    def _arrived(self, item_id: int, at: float) -> None:
        self.seen[item_id] = at
        future = self.waiters.pop(item_id, None)
        if future is not None and not future.done():
            future.set_result(at)


async def _stream(host: str, port: int, client: EventClient) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            (
                f"GET /v1/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {client.token}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            raise StreamRefused(f"GET /v1/events for {client.owner}: {status.decode()!r}")
        buffer = b""
        while True:
            data = await reader.read(65536)
            at = time.perf_counter()
            if not data:
                raise StreamRefused(f"the events stream of {client.owner} ended")
            buffer += data
            if not client.ready.is_set() and _READY in buffer:
                client.ready.set()
            end = 0
            for match in _ITEM.finditer(buffer):
                client._arrived(int(match[1]), at)
                end = match.end()
            buffer = buffer[max(end, len(buffer) - _TAIL) :]
    finally:
        writer.close()


async def connect(
    host: str, port: int, clients: list[EventClient], *, parallel: int, timeout: float
) -> None:
    """Open every client's stream, `parallel` at a time, until each has said `ready`."""
    gate = asyncio.Semaphore(parallel)

    async def open_one(client: EventClient) -> None:
        async with gate:
            client.task = asyncio.create_task(_stream(host, port, client))
            ready = asyncio.create_task(client.ready.wait())
            done, _ = await asyncio.wait(
                {client.task, ready}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if client.task in done:
                ready.cancel()
                client.task.result()  # raises what ended it
            if ready not in done:
                ready.cancel()
                raise TimeoutError(f"the events stream of {client.owner} was not ready")

    await asyncio.gather(*(open_one(client) for client in clients))


async def disconnect(clients: list[EventClient]) -> None:
    tasks = [client.task for client in clients if client.task is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def notify_listen_latencies(dsn: str, samples: int, channel: str = "achilles_bench") -> list[float]:
    """Seconds from a NOTIFY's commit (as its writer sees it return) to its arrival at a
    listening connection's reader thread: the database's share of an SSE event."""
    arrivals: queue.Queue[tuple[str, float]] = queue.Queue()
    listening = threading.Event()

    def listen() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {channel}")
            listening.set()
            for notify in conn.notifies(timeout=60.0, stop_after=samples):
                arrivals.put((notify.payload, time.perf_counter()))

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    if not listening.wait(30.0):
        raise TimeoutError("the LISTEN connection did not start")
    latencies = []
    with psycopg.connect(dsn) as writer:
        for number in range(samples):
            writer.execute("SELECT pg_notify(%s, %s)", (channel, str(number)))
            writer.commit()
            committed = time.perf_counter()
            payload, arrived = arrivals.get(timeout=30.0)
            if payload != str(number):
                raise RuntimeError(f"NOTIFY {number} arrived as {payload!r}")
            latencies.append(arrived - committed)
    listener.join(30.0)
    return latencies
