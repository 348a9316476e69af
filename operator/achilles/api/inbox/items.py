"""The inbox's items: `GET /v1/inbox`, `GET /v1/inbox/{id}`, `POST /v1/inbox/{id}/reply`.

Parse, call `achilles.services.inbox` (the CLI's service: the compare-and-swap, the two
channels' rule and wake-on-reply live there once), answer. Owner-scoped: the caller's
items only (an admin may also read anyone's item); another owner's item is 404 like a
missing one. docs/api.md#inbox.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from achilles.api import pagination
from achilles.api.dependencies import CurrentCaller, DatabaseDep, ReadScope, RunRequesterDep
from achilles.api.idempotency import once_for, replayable, response_of, stored_json
from achilles.api.inbox.auth import InboxOwner
from achilles.api.inbox.schemas import (
    InboxPage,
    ItemDetailOut,
    ReplyIn,
    ReplyOutcome,
    WakeOut,
    etag,
    item_fields,
    item_out,
    listed_out,
    revision_out,
    storable,
)
from achilles.api.problems import PROBLEM_RESPONSES, TYPE_BASE, Problem
from achilles.db.database import Database
from achilles.domain.inbox import (
    ItemState,
    ReplyRefusal,
)
from achilles.services import inbox as service
from achilles.services.idempotency import StoredResponse
from achilles.services.inbox import QueuePosition

router = APIRouter(prefix="/v1", tags=["inbox"], responses=PROBLEM_RESPONSES)

DEFAULT_LIMIT = pagination.DEFAULT_LIMIT
MAX_LIMIT = pagination.MAX_LIMIT
ITEM_ID = Annotated[int, Path(ge=1, le=2**63 - 1, description="The item's id")]
_REVISION = re.compile(r'^(?:"(\d{1,18})"|(\d{1,18}))$')


# --- the list ---


# The two sections of the queue are two cursor kinds of `achilles.api.pagination`.
BLOCKED_CURSOR, REST_CURSOR = "inbox.blocked", "inbox.rest"


def encode_cursor(position: QueuePosition) -> str:
    return pagination.encode_cursor(
        BLOCKED_CURSOR if position.blocked else REST_CURSOR, position.item_id
    )


def decode_cursor(cursor: str) -> QueuePosition:
    try:
        item_id = pagination.decode_cursor(BLOCKED_CURSOR, cursor)
        blocked = True
    except Problem:
        item_id = pagination.decode_cursor(REST_CURSOR, cursor)
        blocked = False
    assert item_id is not None
    return QueuePosition(blocked=blocked, item_id=item_id)


@router.get("/inbox", response_model=InboxPage)
async def list_inbox(
    owner_key: InboxOwner,
    database: DatabaseDep,
    state: Annotated[list[ItemState] | None, Query(description="Only these states")] = None,
    agent: Annotated[
        str | None, Query(max_length=600, description="One agent: `namespace/name` or its id")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=pagination.MAX_CURSOR_LENGTH)] = None,
) -> InboxPage:
    """My items across all my agents: blocked first, then oldest first; keyset pages.
    An admin may read another owner's inbox (`owner=<key>`)."""
    if agent is not None:
        try:
            storable(agent)
        except ValueError as exc:
            raise Problem(422, f"agent: {exc}") from None
    after = decode_cursor(cursor) if cursor else None
    # One thread-pool hop for the database and the page's models; the rest of the
    # request stays on the event loop (`achilles bench api`).
    return await run_in_threadpool(
        _inbox_page,
        database,
        owner_key,
        states=tuple(dict.fromkeys(state or ())),
        agent_ref=agent,
        after=after,
        limit=limit,
    )


def _inbox_page(
    database: Database,
    owner_key: str,
    *,
    states: tuple[ItemState, ...],
    agent_ref: str | None,
    after: QueuePosition | None,
    limit: int,
) -> InboxPage:
    listings = service.owner_inbox(
        database, owner_key, states=states, agent_ref=agent_ref, after=after, limit=limit + 1
    )
    next_cursor = None
    if len(listings) > limit:
        listings = listings[:limit]
        last = listings[-1].item
        next_cursor = encode_cursor(
            QueuePosition(blocked=last.state is ItemState.BLOCKED, item_id=last.id)
        )
    return InboxPage(items=[listed_out(listing) for listing in listings], next_cursor=next_cursor)


# --- one item ---


@router.get("/inbox/{item_id}", response_model=ItemDetailOut)
async def get_item(
    item_id: ITEM_ID,
    response: Response,
    owner_key: ReadScope,
    database: DatabaseDep,
) -> ItemDetailOut:
    """The item, its board's version and its revision history (who replied, when, by
    which channel). `ETag` is the revision to send back as `If-Match`."""
    detail = await run_in_threadpool(_item_detail, database, item_id, owner_key)
    response.headers["ETag"] = etag(detail.revision)
    return detail


def _item_detail(database: Database, item_id: int, owner_key: str | None) -> ItemDetailOut:
    found = service.item_history(database, item_id, owner_key=owner_key)
    listing = found.details.listing
    return ItemDetailOut.model_validate(
        {
            **item_fields(listing.item),
            "agent_name": listing.agent_name,
            "owner": listing.owner_key,
            "board_version": found.details.board_version,
            "wake_on_reply": found.details.wake_on_reply,
            "history": [revision_out(revision) for revision in found.revisions],
        }
    )


# --- replying ---


def parse_if_match(value: str | None) -> int:
    if value is None:
        raise Problem(
            428,
            "If-Match is required: send the item's revision (its ETag, or `revision`"
            ' from GET /v1/inbox/{id}), e.g. If-Match: "3"',
            type_="if-match-required",
        )
    match = _REVISION.match(value.strip())
    if match is None:
        raise Problem(400, f'If-Match: not an item revision (got {value[:40]!r}; e.g. "3")')
    return int(match[1] or match[2])


def _render(receipt: service.ReplyReceipt) -> StoredResponse:
    current = receipt.item.revision
    if receipt.refusal is ReplyRefusal.STALE_REVISION:
        return stored_json(
            412,
            _problem(
                412,
                "precondition-failed",
                f"the item changed since revision you replied to: it is at revision {current};"
                " read it again and reply to what it says now",
                current,
            ),
            headers={"ETag": etag(current)},
            problem=True,
        )
    if receipt.refusal is ReplyRefusal.CHAT_RULE:
        return stored_json(
            409,
            _problem(
                409,
                "chat-reply-refused",
                "a chat reply never replaces a reply the agent has not taken yet;"
                " nothing was written (reply through the inbox channel to replace it)",
                current,
            ),
            headers={"ETag": etag(current)},
            problem=True,
        )
    wake = receipt.wake
    outcome = ReplyOutcome(
        item=item_out(receipt.item),
        board_version=receipt.board_version,
        wake=WakeOut(
            requested=wake.requested,
            delivered=wake.delivered,
            agent_resource=wake.agent_resource,
            request=wake.request,
            detail=wake.detail,
        ),
    )
    return stored_json(200, outcome.model_dump(mode="json"), headers={"ETag": etag(current)})


def _problem(status: int, type_: str, detail: str, revision: int) -> dict[str, object]:
    """A problem document (docs/api.md#errors) carrying the item's current revision."""
    return {
        "type": f"{TYPE_BASE}{type_}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "current_revision": revision,
    }


@router.post(
    "/inbox/{item_id}/reply",
    response_model=ReplyOutcome,
    responses={
        409: {"description": "A chat reply the chat rule refused; nothing written"},
        412: {"description": "If-Match is not the item's revision; nothing written"},
        428: {"description": "If-Match is missing"},
    },
)
def reply(
    item_id: ITEM_ID,
    body: ReplyIn,
    request: Request,
    caller: CurrentCaller,
    database: DatabaseDep,
    requester: RunRequesterDep,
    if_match: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> Response:
    """Answer or clarify one of my items, over the revision I read (`If-Match`).

    The inbox channel always replaces the current reply; the chat channel never replaces
    a reply the agent has not taken (409). A stale revision is 412. With
    `Idempotency-Key`, a retry returns the first response and writes nothing. When the
    owner allows it and the reply unblocked the agent, a run is requested (`wake`)."""
    revision = parse_if_match(if_match)
    once = once_for(
        caller,
        request,
        idempotency_key,
        _render,
        body=body.model_dump(mode="json"),
        preconditions={"If-Match": str(revision)},
    )

    def write() -> Response:
        receipt = service.reply(
            database,
            item_id,
            body.text,
            kind=body.kind,
            channel=body.channel,
            requester=requester,
            expected_revision=revision,
            by=caller.user_key,
            owner_key=caller.user_key,
            once=once,
        )
        return response_of(_render(receipt))

    return replayable(write)
