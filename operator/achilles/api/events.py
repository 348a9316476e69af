"""`GET /v1/events`: the caller's changes as Server-Sent Events (docs/api.md#events).

An event when one of the caller's inbox items or runs changes — ids only (fetch the
object to see it) — from the process's one LISTEN connection (`achilles.api.event_hub`).
Each event's `id` is a position in the database's event log, valid on every replica: a
client that reconnects with `Last-Event-ID` first gets what it missed, then the live
stream. The stream opens with a `ready` event whose id is where it stands (so even a
client that saw no event yet can resume), and sends a keepalive comment every
ACHILLES_API_SSE_KEEPALIVE_SECONDS (15 s). Only the caller's own events, admins included.

A stream lives no longer than what let it open (issue 37): it ends when the caller's
token stops verifying (its `exp`), and when a re-check every `RECHECK_SECONDS` finds the
owner deactivated or the web session signed out; the client's reconnection then meets
the refusal (401, 403).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
from fastapi import APIRouter, FastAPI, Header, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from achilles.api.dependencies import CurrentCaller
from achilles.api.event_hub import EventHub, Subscription
from achilles.api.housekeeping import forget_old_rows
from achilles.api.identity.caller import Caller, still_allowed
from achilles.api.identity.standing import RECHECK_SECONDS
from achilles.api.problems import PROBLEM_RESPONSES, Problem
from achilles.errors import InvalidInputError
from achilles.services import owner_events
from achilles.services.owner_events import Event, EventPosition

CATCH_UP_BATCH = 500
# Threads the event streams' catch-ups share (each replica).
CATCH_UP_THREADS = 2
# How long a request waits for a hub that is (re)starting before 503.
READY_TIMEOUT_SECONDS = 5.0


@asynccontextmanager
async def _hub_lifespan(app: FastAPI) -> AsyncIterator[None]:
    hub = EventHub(app.state.database)
    app.state.event_hub = hub
    await hub.start()
    housekeeping = asyncio.create_task(forget_old_rows(app.state.database))
    try:
        yield
    finally:
        housekeeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await housekeeping
        await hub.stop()


router = APIRouter(
    prefix="/v1", tags=["events"], responses=PROBLEM_RESPONSES, lifespan=_hub_lifespan
)


def event_record(event: Event) -> ServerSentEvent:
    key = "item_id" if event.kind == "inbox_item" else "run_id"
    data = {"kind": event.kind, key: event.object_id, "agent_id": event.agent_id}
    return ServerSentEvent(data=json.dumps(data), event=event.kind, id=event.position.token)


@router.get(
    "/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "The event stream"}},
)
async def events(
    request: Request,
    caller: CurrentCaller,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """Server-Sent Events: `inbox_item` (`item_id`, `agent_id`) and `run` (`run_id`,
    `agent_id`) for the caller's own objects; resumable with `Last-Event-ID`."""
    after = None
    if last_event_id is not None and last_event_id.strip():
        try:
            after = EventPosition.parse(last_event_id)
        except InvalidInputError as exc:
            raise Problem(400, f"Last-Event-ID: {exc}") from None
    hub: EventHub | None = getattr(request.app.state, "event_hub", None)
    if hub is None or not await hub.ready(READY_TIMEOUT_SECONDS):
        raise Problem(503, "the event stream is starting; try again shortly")
    cap = request.app.state.settings.max_streams_per_user
    if hub.streams_of(caller.user_key) >= cap:
        raise Problem(
            429,
            f"at most {cap} open event streams per person; close one first",
            type_="rate-limited",
            headers={"Retry-After": str(int(RECHECK_SECONDS))},
        )
    subscription = hub.subscribe(caller.user_key)
    return EventSourceResponse(
        _stream(request, caller, hub, subscription, after),
        ping=request.app.state.settings.sse_keepalive_seconds,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    request: Request,
    caller: Caller,
    hub: EventHub,
    subscription: Subscription,
    after: EventPosition | None,
) -> AsyncIterator[ServerSentEvent]:
    try:
        seen = subscription.start
        if after is not None:
            # The hub may lag the log (its NOTIFYs still in flight): catch up to where the
            # log stands now, so all that was committed before this request comes before
            # `ready`; the hub's later copies of those events are dropped below.
            upto = max(subscription.start, await _log_position(request))
            async for event in _missed(request, subscription.owner_key, after, upto):
                yield event_record(event)
            seen = max(after, upto)
        yield ServerSentEvent(data="{}", event="ready", id=seen.token)
        while True:
            wait = RECHECK_SECONDS
            if caller.valid_until is not None:
                wait = min(wait, caller.valid_until - time.time())
                if wait <= 0:  # the token expired: a reconnection meets the 401
                    return
            try:
                live = await asyncio.wait_for(subscription.queue.get(), wait)
            except TimeoutError:
                if not await still_allowed(request, caller):
                    return
                continue
            if live is None:  # the hub closed this stream: the client resumes
                return
            if live.position > seen:
                yield event_record(live)
    finally:
        hub.unsubscribe(subscription)


async def _log_position(request: Request) -> EventPosition:
    return await anyio.to_thread.run_sync(
        owner_events.start_position,
        request.app.state.database,
        limiter=_catch_up_threads(request),
    )


async def _missed(
    request: Request, owner_key: str, after: EventPosition, upto: EventPosition
) -> AsyncIterator[Event]:
    """The caller's events in (after, upto]: settled, so all in the log."""
    database = request.app.state.database
    while after < upto:
        # Catch-ups take their own few threads, not the requests' pool (a reconnection
        # from `0-0` reads up to a day of events).
        batch = await anyio.to_thread.run_sync(
            owner_events.missed_events,
            database,
            owner_key,
            after,
            upto,
            CATCH_UP_BATCH,
            limiter=_catch_up_threads(request),
        )
        for event in batch:
            yield event
        if len(batch) < CATCH_UP_BATCH:
            return
        after = batch[-1].position


def _catch_up_threads(request: Request) -> anyio.CapacityLimiter:
    limiter: anyio.CapacityLimiter | None = getattr(request.app.state, "catch_up_threads", None)
    if limiter is None:
        limiter = anyio.CapacityLimiter(CATCH_UP_THREADS)
        request.app.state.catch_up_threads = limiter
    return limiter
