"""The inbox rules as pure state changes: the model the SQL must agree with.

One function per act (advance, re-ask, reply, take, acknowledge), built on the rules of
`achilles.domain.inbox`. The unit tests check the rules through them, and the database
tests (`tests/db/test_inbox_interleavings.py`) run every act on the real database and
here side by side and require the same results.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from achilles.domain.inbox import (
    AckStatus,
    InboxItem,
    ItemState,
    Reply,
    ReplyChannel,
    ReplyKind,
    acknowledge_status,
    has_unprocessed_reply,
    is_chat_reply_allowed,
)


def advanced(item: InboxItem, target: ItemState, context: str | None) -> InboxItem:
    new_context = item.context if context is None else context
    return dataclasses.replace(item, state=target, context=new_context, revision=item.revision + 1)


def reasked(item: InboxItem, question: str, context: str | None, state: ItemState) -> InboxItem:
    """Same key, same row: a change bumps the revision, a repeat changes nothing. A change
    of state is an advance (versioned, `check_reask`) that also sets the question; like
    an advance it keeps the context when none is given."""
    if state is not item.state:
        return dataclasses.replace(advanced(item, state, context), question=question)
    if (item.question, item.context) == (question, context):
        return item
    return dataclasses.replace(item, question=question, context=context, revision=item.revision + 1)


def replied(
    item: InboxItem, text: str, kind: ReplyKind, channel: ReplyChannel, now: datetime
) -> InboxItem | None:
    """The item after a human's reply, or None when the chat rule refuses it."""
    if channel is ReplyChannel.CHAT and not is_chat_reply_allowed(item):
        return None
    reply = Reply(
        text=text, kind=kind, channel=channel, serial=item.reply_serial + 1, handled_at=now
    )
    return dataclasses.replace(item, reply=reply, revision=item.revision + 1)


def taken(item: InboxItem, now: datetime) -> InboxItem | None:
    """The item after the agent takes its unprocessed reply (idempotent), or None."""
    if item.reply is None or not has_unprocessed_reply(item):
        return None
    if item.reply.seen_at is not None:
        return item
    return dataclasses.replace(item, reply=dataclasses.replace(item.reply, seen_at=now))


def acknowledged(item: InboxItem, reply_serial: int, outcome: str) -> InboxItem:
    if acknowledge_status(item, reply_serial) is not AckStatus.ACKNOWLEDGED:
        return item
    assert item.reply is not None
    return dataclasses.replace(item, reply=dataclasses.replace(item.reply, outcome=outcome))
