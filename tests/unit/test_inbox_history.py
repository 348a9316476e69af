"""The history checker reports each kind of violation in a hand-made history, passes a good one."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from achilles.domain.inbox import InboxItem, ItemState, Reply, ReplyChannel, ReplyKind
from tests.tools.inbox_history import Event, Op, Snapshot, check_history

T = datetime(2026, 11, 30, tzinfo=UTC)
ITEM = InboxItem(
    id=1, agent_id=9, key="q", state=ItemState.BLOCKED, question="Q?", context=None, revision=1
)
BEFORE = Snapshot(items={1: ITEM}, board_versions={9: 1})


def _reply(text: str, serial: int, channel: ReplyChannel, **marks: object) -> Reply:
    return Reply(
        text=text,
        kind=ReplyKind.ANSWER,
        channel=channel,
        serial=serial,
        handled_at=T,
        **marks,  # type: ignore[arg-type]
    )


def _event(op: Op, **fields: object) -> Event:
    return Event(op=op, item_id=1, agent_id=9, **fields)  # type: ignore[arg-type]


# A good history: inbox reply (rev 2, serial 1), a take, a chat reply over the taken
# reply (rev 3, serial 2), a refused chat reply, a take and an acknowledgement,
# then one advance won and one lost from the same read.
GOOD_EVENTS = [
    _event(Op.INBOX_REPLY, ok=True, revision=2, board_version=2, serial=1, text="a"),
    _event(Op.TAKE, ok=True, serial=1, revision=2),
    _event(Op.CHAT_REPLY, ok=True, revision=3, board_version=3, serial=2, text="b"),
    _event(Op.CHAT_REPLY, ok=False, serial=2, text="c", detail="refused"),
    _event(Op.TAKE, ok=True, serial=2, revision=3),
    _event(Op.ACK, ok=True, serial=2, text="used b", detail="acknowledged"),
    _event(
        Op.ADVANCE,
        ok=True,
        revision=4,
        board_version=4,
        expected_revision=3,
        expected_board_version=3,
        state=ItemState.DONE,
    ),
    _event(
        Op.ADVANCE,
        ok=False,
        expected_revision=3,
        expected_board_version=3,
        state=ItemState.NA,
        detail="InboxConflict",
    ),
]
GOOD_FINAL = dataclasses.replace(
    ITEM,
    state=ItemState.DONE,
    revision=4,
    reply=_reply("b", 2, ReplyChannel.CHAT, seen_at=T, outcome="used b"),
)
AFTER = Snapshot(items={1: GOOD_FINAL}, board_versions={9: 4})


def test_a_good_history_passes() -> None:
    assert check_history(BEFORE, GOOD_EVENTS, AFTER, unprocessed=set()) == []


def _replace_event(index: int, **changes: object) -> list[Event]:
    events = list(GOOD_EVENTS)
    events[index] = dataclasses.replace(events[index], **changes)  # type: ignore[arg-type]
    return events


@pytest.mark.parametrize(
    ("events", "after", "unprocessed", "complaint"),
    [
        # The take of serial 1 never happened: the chat reply landed on an untaken reply.
        (
            [e for i, e in enumerate(GOOD_EVENTS) if i != 1],
            AFTER,
            set(),
            "which nobody had taken",
        ),
        # An inbox reply was refused.
        (_replace_event(0, ok=False, detail="refused"), AFTER, set(), "inbox reply was refused"),
        # Two writes claim revision 3 (and 4 is missing).
        (_replace_event(6, revision=3), AFTER, set(), "produced revisions"),
        # Two advances won from the same read.
        (
            _replace_event(7, ok=True, revision=5, board_version=5, detail=""),
            dataclasses.replace(AFTER, items={1: dataclasses.replace(GOOD_FINAL, revision=5)}),
            set(),
            "advances won from the same revision 3",
        ),
        # The final reply is not the last accepted one: a reply was lost.
        (
            GOOD_EVENTS,
            Snapshot(
                items={
                    1: dataclasses.replace(
                        GOOD_FINAL,
                        reply=_reply("a", 2, ReplyChannel.CHAT, seen_at=T, outcome="used b"),
                    )
                },
                board_versions={9: 4},
            ),
            set(),
            "a reply was lost",
        ),
        # An outcome for a reply nobody acknowledged.
        (
            [e for e in GOOD_EVENTS if e.op is not Op.ACK],
            AFTER,
            set(),
            "was not acknowledged for this reply",
        ),
        # The unprocessed query disagrees with the rows.
        (GOOD_EVENTS, AFTER, {1}, "the unprocessed replies found [1]"),
        # The board moved more than the writes account for.
        (GOOD_EVENTS, Snapshot(items={1: GOOD_FINAL}, board_versions={9: 5}), set(), "board"),
        # Final state disagrees with the last state-changing write.
        (
            GOOD_EVENTS,
            Snapshot(
                items={1: dataclasses.replace(GOOD_FINAL, state=ItemState.NA)},
                board_versions={9: 4},
            ),
            set(),
            "final state",
        ),
    ],
)
def test_each_violation_is_reported(
    events: list[Event], after: Snapshot, unprocessed: set[int], complaint: str
) -> None:
    problems = check_history(BEFORE, events, after, unprocessed)
    assert any(complaint in p for p in problems), problems
