"""How inbox items are shown: JSON records for the CLI and tools, labels for people,
and the note a run starts with when humans answered the agent's questions. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def item_record(item: InboxItem, *, board_version: int | None = None) -> dict[str, Any]:
    """A JSON-ready record; replies appear under `reply` (null when there is none)."""
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
        "created_at": iso_utc(item.created_at),
        "updated_at": iso_utc(item.updated_at),
    }
    if reply is not None:
        record["reply"] = {
            "text": reply.text,
            "kind": reply.kind.value,
            "channel": reply.channel.value,
            "serial": reply.serial,
            "handled_at": iso_utc(reply.handled_at),
            "seen_at": iso_utc(reply.seen_at),
            "outcome": reply.outcome,
        }
    if board_version is not None:
        record["board_version"] = board_version
    return record


def pending_replies_message(items: Sequence[InboxItem]) -> str | None:
    """The note a run starts with when people answered; None when nobody did."""
    if not items:
        return None
    lines = [
        f"Since your last run, people answered {len(items)} of your inbox question(s)."
        " For each one, act on the reply, then call inbox_acknowledge with its item_id,"
        " reply_serial and a short outcome; a reply of kind 'clarify' asks you to explain"
        " or rephrase the question (update it with inbox_ask under the same key)."
    ]
    for item in items:
        reply = item.reply
        if reply is None:
            continue
        lines.append(
            f"- item_id={item.id} key={item.key!r} reply_serial={reply.serial}"
            f" kind={reply.kind.value} state={item.state.value}\n"
            f"  question: {item.question}\n"
            f"  reply: {reply.text}"
        )
    return "\n".join(lines)
