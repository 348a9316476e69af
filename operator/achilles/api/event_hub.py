"""One event listener per API process, fanning the owners' events out to SSE streams.

The hub holds ONE database connection that LISTENs on `achilles_events` (not one per
client, and no polling): every NOTIFY (and every reconnection) makes it read the log's
newly settled events (`achilles.db.api.events`) with one query, and hand each to the
subscribers of that event's owner only. A subscriber starts at the hub's position when
it subscribes; what came before is its own catch-up (`Last-Event-ID`). A subscriber that
falls `QUEUE_LIMIT` events behind is closed: its client reconnects with `Last-Event-ID`
and catches up from the log, instead of the process buffering for it without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from achilles.db.api.events import notifications
from achilles.db.database import Database
from achilles.services import owner_events
from achilles.services.owner_events import Event, EventPosition

log = logging.getLogger("achilles.api.events")

BATCH = 500
QUEUE_LIMIT = 1000
# An unsettled event waits for an older transaction to end; look again this often.
UNSETTLED_RETRY_SECONDS = 0.02


@dataclass(eq=False)
class Subscription:
    owner_key: str
    start: EventPosition  # the hub's position when it subscribed: later events come here
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    closed: bool = False  # the hub ended it (fell behind, or the hub stops): None is queued

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class EventHub:
    def __init__(self, database: Database) -> None:
        self._database = database
        self._position: EventPosition | None = None
        self._subscribers: dict[str, set[Subscription]] = {}
        self._kick = asyncio.Event()
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="events-listen"),
            asyncio.create_task(self._deliver(), name="events-deliver"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.close()
        self._subscribers.clear()

    async def ready(self, timeout: float) -> bool:
        """Whether the hub is listening (it has a position), waiting up to `timeout`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self._ready.is_set()

    def subscribe(self, owner_key: str) -> Subscription:
        assert self._position is not None, "subscribe after ready()"
        subscription = Subscription(owner_key=owner_key, start=self._position)
        self._subscribers.setdefault(owner_key, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.owner_key)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[subscription.owner_key]

    def streams_of(self, owner_key: str) -> int:
        return len(self._subscribers.get(owner_key, ()))

    @property
    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())

    async def _listen(self) -> None:
        stream: AsyncIterator[None] = notifications(self._database.url)
        async for _ in stream:
            self._kick.set()

    async def _deliver(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            try:
                await self._drain()
            except Exception as exc:  # the database went: the listener reconnects and kicks
                log.warning("reading the event log failed: %s", " ".join(str(exc).split()))

    async def _drain(self) -> None:
        if self._position is None:
            self._position = await asyncio.to_thread(owner_events.start_position, self._database)
            self._ready.set()
        while True:
            batch = await asyncio.to_thread(
                owner_events.settled_after, self._database, self._position, BATCH
            )
            for event in batch.events:
                self._dispatch(event)
                self._position = event.position
            if batch.more:
                continue
            if not batch.unsettled:
                break
            await asyncio.sleep(UNSETTLED_RETRY_SECONDS)

    def _dispatch(self, event: Event) -> None:
        for subscription in list(self._subscribers.get(event.owner_key, ())):
            if subscription.closed:
                continue
            if subscription.queue.qsize() >= QUEUE_LIMIT:
                log.info("closing a stream of %s: %d events behind", event.owner_key, QUEUE_LIMIT)
                subscription.close()
                continue
            subscription.queue.put_nowait(event)
