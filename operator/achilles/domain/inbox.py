"""Agent Inbox rules (seed 003, DESIGN.md §5), pure.

Each agent has a board of items, one row per question or dependency (the key
is stable: one question, one row). The rules the database layer enforces in SQL
are stated here as pure predicates and checks over an `InboxItem`; the database
layer uses them to explain a refusal after the fact, and the tests hold the SQL to
a pure model of every act built on them (`tests/tools/inbox_oracle.py`).

Versions, exactly:
- `revision` (per item) is the item's compare-and-swap token. It grows by one
  on every change to what the item says: created (1), re-asked with a changed
  question/context, advanced, and every *accepted* human reply. A re-ask that
  changes the state is an advance: it carries the revision and board version it
  read, or is refused (`check_reask`). The
  agent's bookkeeping marks — taking a reply (`reply_seen_at`) and
  acknowledging it (`outcome`) — do not bump it, so an agent can take, decide
  and advance with the revision it read.
- `board_version` (per agent) grows by one with every revision bump of any of
  its items, in the same transaction. An advance therefore fails when anything
  on the board changed since the caller read it, including a human's reply.

Replies (two channels, seed 003): an inbox reply always replaces the current
reply; a chat reply is written only when there is no reply or the current one
was already taken. Every accepted reply gets the next `reply_serial`, clears
`reply_seen_at` and `outcome`, and sets `handled_at`. Acknowledging names the
serial it processed, so a reply that arrived after the take is never marked
processed by mistake.

An *unprocessed reply* ("answered but not processed") = `handled_at` set and
`outcome` NULL. An agent
that crashed after taking a reply leaves the item there; it leaves `blocked`
only after the reply was acknowledged (`can_leave_blocked`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from achilles.errors import (
    InboxConflict,
    InboxReplyPending,
    InboxVersionRequired,
    InvalidInboxTransition,
    InvalidInputError,
)


class ItemState(StrEnum):
    TRACKED = "tracked"
    PARTIAL = "partial"
    MISSING = "missing"
    NA = "na"
    DONE = "done"
    # The human's turn: the agent waits for a reply.
    BLOCKED = "blocked"


class ReplyKind(StrEnum):
    ANSWER = "answer"
    # The human asks the agent to clarify the question instead of answering it.
    CLARIFY = "clarify"


class ReplyChannel(StrEnum):
    INBOX = "inbox"
    CHAT = "chat"


_OPEN = frozenset({ItemState.TRACKED, ItemState.PARTIAL, ItemState.MISSING})
_ALL = frozenset(ItemState)

# Allowed `board_advance` moves. Open items and blocked ones may go anywhere
# else; a closed verdict (done, na) is only reopened — to be tracked again or
# re-asked — never flipped directly to the other verdict or to a half state.
ALLOWED_TRANSITIONS: Mapping[ItemState, frozenset[ItemState]] = {
    **{state: _ALL - {state} for state in _OPEN},
    ItemState.BLOCKED: _ALL - {ItemState.BLOCKED},
    ItemState.DONE: frozenset({ItemState.TRACKED, ItemState.BLOCKED}),
    ItemState.NA: frozenset({ItemState.TRACKED, ItemState.BLOCKED}),
}

MAX_KEY_LENGTH = 200
MAX_QUESTION_LENGTH = 4_000
MAX_TEXT_LENGTH = 20_000  # context, reply, outcome


def can_transition(current: ItemState, target: ItemState) -> bool:
    return target in ALLOWED_TRANSITIONS[current]


def states_that_may_become(target: ItemState) -> frozenset[ItemState]:
    """Where an item may come from to end up in `target` (SQL guards use this)."""
    return frozenset(s for s, targets in ALLOWED_TRANSITIONS.items() if target in targets)


@dataclass(frozen=True)
class Reply:
    text: str
    kind: ReplyKind
    channel: ReplyChannel
    serial: int  # 1 for the item's first accepted reply, then +1 per accepted reply
    handled_at: datetime
    seen_at: datetime | None = None  # the agent took it
    outcome: str | None = None  # the agent acknowledged processing it
    by: str | None = None  # who replied, when known (the API's caller)


@dataclass(frozen=True)
class InboxItem:
    id: int
    agent_id: int
    key: str
    state: ItemState
    question: str
    context: str | None
    revision: int
    reply: Reply | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def reply_serial(self) -> int:
        return self.reply.serial if self.reply else 0


@dataclass(frozen=True)
class Board:
    agent_id: int
    version: int  # 0 = the agent never wrote to its board
    items: tuple[InboxItem, ...]


# --- predicates ---


def has_unprocessed_reply(item: InboxItem) -> bool:
    """An unprocessed reply (answered but not processed): what the agent's next run
    starts from."""
    return item.reply is not None and item.reply.outcome is None


def is_awaiting_human(item: InboxItem) -> bool:
    return item.state is ItemState.BLOCKED and not has_unprocessed_reply(item)


def is_chat_reply_allowed(item: InboxItem) -> bool:
    """A chat reply never replaces a reply the agent has not taken yet."""
    return item.reply is None or item.reply.seen_at is not None


def can_leave_blocked(item: InboxItem) -> bool:
    """The item stays the human's until the agent processed the human's reply."""
    return item.state is not ItemState.BLOCKED or not has_unprocessed_reply(item)


# --- why a write must be refused (the SQL decides; these explain) ---


def check_advance(
    item: InboxItem,
    board_version: int,
    *,
    expected_revision: int,
    expected_board_version: int,
    target: ItemState,
) -> None:
    """Raise why `board_advance` must refuse, or return when it may proceed."""
    if item.revision != expected_revision or board_version != expected_board_version:
        raise InboxConflict(
            item.id,
            expected_revision=expected_revision,
            current_revision=item.revision,
            expected_board_version=expected_board_version,
            current_board_version=board_version,
        )
    if not can_transition(item.state, target):
        raise InvalidInboxTransition(item.id, item.state.value, target.value)
    if target is not item.state and not can_leave_blocked(item):
        raise InboxReplyPending(item.id, item.reply_serial)


def check_reask(
    item: InboxItem,
    board_version: int,
    target: ItemState,
    *,
    expected_revision: int | None = None,
    expected_board_version: int | None = None,
) -> None:
    """Raise why re-asking `item` as `target` must refuse, or return when it may proceed.

    Re-asking may always change the question and context (revision + 1). A change of
    state is a versioned operation (seed 003): it needs the revision and board version
    the caller read, and is then exactly `board_advance`'s compare-and-swap."""
    if target is item.state:
        return
    if expected_revision is None or expected_board_version is None:
        raise InboxVersionRequired(
            item.id,
            item.state.value,
            target.value,
            revision=item.revision,
            board_version=board_version,
        )
    check_advance(
        item,
        board_version,
        expected_revision=expected_revision,
        expected_board_version=expected_board_version,
        target=target,
    )


class ReplyRefusal(StrEnum):
    """Why a human's reply was not written (nothing changed)."""

    # A chat reply over a reply the agent has not taken yet (seed 003's chat rule).
    CHAT_RULE = "chat_rule"
    # The item's revision is not the one the person replied to (compare-and-swap).
    STALE_REVISION = "stale_revision"


class AckStatus(StrEnum):
    ACKNOWLEDGED = "acknowledged"
    # This serial was acknowledged before; the outcome is kept as it was.
    ALREADY_ACKNOWLEDGED = "already_acknowledged"
    # A newer reply replaced the one the agent took: take again.
    SUPERSEDED = "superseded"
    # The reply was never taken: take it first.
    NOT_TAKEN = "not_taken"
    # No reply with this serial ever came (none at all, or only older ones).
    NO_SUCH_REPLY = "no_such_reply"


def acknowledge_status(item: InboxItem, reply_serial: int) -> AckStatus:
    reply = item.reply
    if reply is None or reply_serial > reply.serial:
        return AckStatus.NO_SUCH_REPLY
    if reply_serial < reply.serial:
        return AckStatus.SUPERSEDED
    if reply.outcome is not None:
        return AckStatus.ALREADY_ACKNOWLEDGED
    if reply.seen_at is None:
        return AckStatus.NOT_TAKEN
    return AckStatus.ACKNOWLEDGED


# --- input validation (messages name the field) ---


def validate_key(key: str) -> str:
    if not key or key != key.strip():
        raise InvalidInputError("key: must be non-empty without surrounding spaces")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInputError(f"key: at most {MAX_KEY_LENGTH} characters (got {len(key)})")
    if any(not ch.isprintable() for ch in key):
        raise InvalidInputError("key: must not contain control characters")
    return key


def validate_text(field: str, value: str, *, limit: int = MAX_TEXT_LENGTH) -> str:
    """Free text a person or agent writes: not blank, bounded."""
    if not value.strip():
        raise InvalidInputError(f"{field}: must not be blank")
    if len(value) > limit:
        raise InvalidInputError(f"{field}: at most {limit} characters (got {len(value)})")
    return value
