"""An inbox item as people and agents see it: one JSON record, and whose turn it is. Pure.

The same record is what `achilles inbox … --json` prints and what the agent's inbox
tools return, so a person and an agent always read an item alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from achilles.domain.inbox import InboxItem, ItemState, has_unprocessed_reply
from achilles.domain.timestamps import iso_utc


def status_label(item: InboxItem) -> str:
    """Whose turn it is, in words: what a person scanning the board needs."""
    reply = item.reply
    if reply is not None and reply.outcome is None:
        return "reply taken, not processed" if reply.seen_at else "answered, not taken"
    if item.state is ItemState.BLOCKED:
        return "waiting for a human"
    return "processed" if reply is not None else "agent's"


def item_record(
    item: InboxItem,
    *,
    board_version: int | None = None,
    instant: Callable[[datetime | None], Any] = iso_utc,
) -> dict[str, Any]:
    """A JSON-ready record; replies appear under `reply` (null when there is none).
    `instant` writes each timestamp (ISO 8601 UTC text by default; the HTTP API passes
    UTC datetimes, which its models write the same way without a parse)."""
    reply = item.reply
    record: dict[str, Any] = {
        "id": item.id,
        "agent_id": item.agent_id,
        "key": item.key,
        "state": item.state.value,
        "status": status_label(item),
        "question": item.question,
        "context": item.context,
        "revision": item.revision,
        "reply_serial": item.reply_serial,
        "unprocessed": has_unprocessed_reply(item),
        "reply": None,
        "created_at": instant(item.created_at),
        "updated_at": instant(item.updated_at),
    }
    if reply is not None:
        record["reply"] = {
            "text": reply.text,
            "kind": reply.kind.value,
            "channel": reply.channel.value,
            "serial": reply.serial,
            "handled_at": instant(reply.handled_at),
            "seen_at": instant(reply.seen_at),
            "outcome": reply.outcome,
            "by": reply.by,
        }
    if board_version is not None:
        record["board_version"] = board_version
    return record
