"""The Agent Inbox rules, pure and table-driven (seed 003, DESIGN.md §5)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from achilles.domain.inbox import (
    ALLOWED_TRANSITIONS,
    AckStatus,
    InboxItem,
    ItemState,
    Reply,
    ReplyChannel,
    ReplyKind,
    acknowledge_status,
    can_leave_blocked,
    can_transition,
    check_advance,
    check_reask,
    has_unprocessed_reply,
    is_awaiting_human,
    is_chat_reply_allowed,
    states_that_may_become,
    validate_key,
    validate_text,
)
from achilles.domain.inbox_wake import (
    InboxSettings,
    inbox_settings_from_meta,
    should_request_run,
)
from achilles.errors import (
    InboxConflict,
    InboxReplyPending,
    InboxVersionRequired,
    InvalidInboxTransition,
    InvalidInputError,
)
from tests.tools.inbox_oracle import acknowledged, advanced, reasked, replied, taken

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
S = ItemState

# Every (from, to) pair and whether `board_advance` may take it.
TRANSITIONS: list[tuple[ItemState, ItemState, bool]] = [
    *[(s, s, False) for s in ItemState],  # not a move; re-ask changes content instead
    (S.TRACKED, S.PARTIAL, True),
    (S.TRACKED, S.MISSING, True),
    (S.TRACKED, S.BLOCKED, True),
    (S.TRACKED, S.DONE, True),
    (S.TRACKED, S.NA, True),
    (S.PARTIAL, S.TRACKED, True),
    (S.PARTIAL, S.MISSING, True),
    (S.PARTIAL, S.BLOCKED, True),
    (S.PARTIAL, S.DONE, True),
    (S.PARTIAL, S.NA, True),
    (S.MISSING, S.TRACKED, True),
    (S.MISSING, S.PARTIAL, True),
    (S.MISSING, S.BLOCKED, True),
    (S.MISSING, S.DONE, True),
    (S.MISSING, S.NA, True),
    (S.BLOCKED, S.TRACKED, True),
    (S.BLOCKED, S.PARTIAL, True),
    (S.BLOCKED, S.MISSING, True),
    (S.BLOCKED, S.DONE, True),
    (S.BLOCKED, S.NA, True),
    # A closed verdict is reopened (tracked again, or re-asked), never flipped.
    (S.DONE, S.TRACKED, True),
    (S.DONE, S.BLOCKED, True),
    (S.DONE, S.PARTIAL, False),
    (S.DONE, S.MISSING, False),
    (S.DONE, S.NA, False),
    (S.NA, S.TRACKED, True),
    (S.NA, S.BLOCKED, True),
    (S.NA, S.PARTIAL, False),
    (S.NA, S.MISSING, False),
    (S.NA, S.DONE, False),
]


def test_the_table_covers_every_pair_once() -> None:
    pairs = [(a, b) for a, b, _ in TRANSITIONS]
    assert len(pairs) == len(set(pairs)) == len(ItemState) ** 2


@pytest.mark.parametrize(("current", "target", "allowed"), TRANSITIONS)
def test_transitions(current: ItemState, target: ItemState, allowed: bool) -> None:
    assert can_transition(current, target) is allowed
    assert (current in states_that_may_become(target)) is allowed


def test_every_state_has_a_way_out_and_blocked_is_reachable_from_everywhere() -> None:
    assert all(ALLOWED_TRANSITIONS[s] for s in ItemState)
    assert states_that_may_become(S.BLOCKED) == frozenset(ItemState) - {S.BLOCKED}


def _item(state: ItemState = S.BLOCKED, revision: int = 1, reply: Reply | None = None) -> InboxItem:
    return InboxItem(
        id=7,
        agent_id=1,
        key="db-choice",
        state=state,
        question="Which database?",
        context=None,
        revision=revision,
        reply=reply,
    )


def _reply(serial: int = 1, *, seen: bool = False, outcome: str | None = None) -> Reply:
    return Reply(
        text="Postgres",
        kind=ReplyKind.ANSWER,
        channel=ReplyChannel.INBOX,
        serial=serial,
        handled_at=T0,
        seen_at=T0 if seen or outcome else None,
        outcome=outcome,
    )


# Reply situations: (name, reply or None, unprocessed, chat allowed)
REPLY_SITUATIONS = [
    ("no reply", None, False, True),
    ("answered, not taken", _reply(), True, False),
    ("taken, not acknowledged", _reply(seen=True), True, True),
    ("acknowledged", _reply(outcome="used Postgres"), False, True),
]


@pytest.mark.parametrize(("name", "reply", "unprocessed", "chat_allowed"), REPLY_SITUATIONS)
def test_reply_predicates(
    name: str, reply: Reply | None, unprocessed: bool, chat_allowed: bool
) -> None:
    item = _item(reply=reply)
    assert has_unprocessed_reply(item) is unprocessed, name
    assert is_chat_reply_allowed(item) is chat_allowed, name
    assert can_leave_blocked(item) is not unprocessed, name
    assert is_awaiting_human(item) is not unprocessed, name
    # Only blocked items are held by an unprocessed reply, or wait for a human.
    assert can_leave_blocked(dataclasses.replace(item, state=S.TRACKED))
    assert not is_awaiting_human(dataclasses.replace(item, state=S.TRACKED))


@pytest.mark.parametrize(("name", "reply", "unprocessed", "chat_allowed"), REPLY_SITUATIONS)
def test_inbox_reply_always_replaces_and_chat_only_over_a_taken_reply(
    name: str, reply: Reply | None, unprocessed: bool, chat_allowed: bool
) -> None:
    item = _item(revision=3, reply=reply)
    later = T0 + timedelta(minutes=5)
    by_inbox = replied(item, "MySQL", ReplyKind.CLARIFY, ReplyChannel.INBOX, later)
    assert by_inbox is not None
    assert by_inbox.reply == Reply(
        text="MySQL",
        kind=ReplyKind.CLARIFY,
        channel=ReplyChannel.INBOX,
        serial=item.reply_serial + 1,
        handled_at=later,
    )
    assert by_inbox.revision == 4
    by_chat = replied(item, "MySQL", ReplyKind.ANSWER, ReplyChannel.CHAT, later)
    if chat_allowed:
        assert by_chat is not None
        assert by_chat.reply is not None
        assert (by_chat.reply.channel, by_chat.reply.seen_at, by_chat.reply.outcome) == (
            ReplyChannel.CHAT,
            None,
            None,
        )
        assert by_chat.revision == 4
    else:
        assert by_chat is None, name


@pytest.mark.parametrize(
    ("reply", "expected_seen"),
    [(None, None), (_reply(), T0 + timedelta(1)), (_reply(seen=True), T0)],
)
def test_take_marks_once_and_only_an_unprocessed_reply(
    reply: Reply | None, expected_seen: datetime | None
) -> None:
    result = taken(_item(reply=reply), T0 + timedelta(1))
    if expected_seen is None:
        assert result is None
    else:
        assert result is not None
        assert result.reply is not None
        assert result.reply.seen_at == expected_seen
        assert result.revision == 1  # bookkeeping, not a change of the item
    assert taken(_item(reply=_reply(outcome="x")), T0) is None


@pytest.mark.parametrize(
    ("reply", "serial", "status"),
    [
        (None, 1, AckStatus.NO_SUCH_REPLY),
        (_reply(serial=2), 2, AckStatus.NOT_TAKEN),
        (_reply(serial=2, seen=True), 2, AckStatus.ACKNOWLEDGED),
        (_reply(serial=2, seen=True), 1, AckStatus.SUPERSEDED),
        (_reply(serial=2, seen=True), 3, AckStatus.NO_SUCH_REPLY),
        (_reply(serial=2, outcome="done"), 2, AckStatus.ALREADY_ACKNOWLEDGED),
        (_reply(serial=2, outcome="done"), 1, AckStatus.SUPERSEDED),
    ],
)
def test_acknowledge_names_the_reply_it_processed(
    reply: Reply | None, serial: int, status: AckStatus
) -> None:
    item = _item(reply=reply)
    assert acknowledge_status(item, serial) is status
    after = acknowledged(item, serial, "used it")
    if status is AckStatus.ACKNOWLEDGED:
        assert after.reply is not None
        assert after.reply.outcome == "used it"
        assert not has_unprocessed_reply(after)
        assert after.revision == item.revision
    else:
        assert after == item


ADVANCE_CASES: list[tuple[str, InboxItem, int, int, int, ItemState, type[Exception] | None]] = [
    # (name, item, board version now, expected revision, expected board version, target, error)
    ("fresh read", _item(S.TRACKED, 3), 9, 3, 9, S.DONE, None),
    ("item moved", _item(S.TRACKED, 4), 9, 3, 9, S.DONE, InboxConflict),
    ("board moved", _item(S.TRACKED, 3), 10, 3, 9, S.DONE, InboxConflict),
    ("both moved", _item(S.TRACKED, 4), 10, 3, 9, S.DONE, InboxConflict),
    ("forbidden move", _item(S.DONE, 3), 9, 3, 9, S.NA, InvalidInboxTransition),
    ("no move", _item(S.TRACKED, 3), 9, 3, 9, S.TRACKED, InvalidInboxTransition),
    ("blocked, no reply", _item(S.BLOCKED, 3), 9, 3, 9, S.NA, None),
    ("blocked, reply unread", _item(S.BLOCKED, 3, _reply()), 9, 3, 9, S.DONE, InboxReplyPending),
    (
        "blocked, reply taken only",
        _item(S.BLOCKED, 3, _reply(seen=True)),
        9,
        3,
        9,
        S.DONE,
        InboxReplyPending,
    ),
    (
        "blocked, reply acknowledged",
        _item(S.BLOCKED, 3, _reply(outcome="ok")),
        9,
        3,
        9,
        S.DONE,
        None,
    ),
    ("tracked with reply unread", _item(S.TRACKED, 3, _reply()), 9, 3, 9, S.DONE, None),
]


@pytest.mark.parametrize(
    ("name", "item", "board_version", "expected_revision", "expected_board", "target", "error"),
    ADVANCE_CASES,
)
def test_check_advance(
    name: str,
    item: InboxItem,
    board_version: int,
    expected_revision: int,
    expected_board: int,
    target: ItemState,
    error: type[Exception] | None,
) -> None:
    def check() -> None:
        check_advance(
            item,
            board_version,
            expected_revision=expected_revision,
            expected_board_version=expected_board,
            target=target,
        )

    if error is None:
        check()
        moved = advanced(item, target, None)
        assert (moved.state, moved.revision, moved.context) == (target, item.revision + 1, None)
    else:
        with pytest.raises(error):
            check()


def test_conflict_carries_the_current_versions() -> None:
    with pytest.raises(InboxConflict) as conflict:
        check_advance(
            _item(S.TRACKED, 5), 12, expected_revision=3, expected_board_version=9, target=S.DONE
        )
    assert (conflict.value.current_revision, conflict.value.current_board_version) == (5, 12)
    assert (conflict.value.expected_revision, conflict.value.expected_board_version) == (3, 9)


def test_advance_replaces_context_only_when_given() -> None:
    item = dataclasses.replace(_item(S.TRACKED), context="old")
    assert advanced(item, S.DONE, None).context == "old"
    assert advanced(item, S.DONE, "found it in the wiki").context == "found it in the wiki"


@pytest.mark.parametrize(
    ("item", "question", "context", "state", "revision"),
    [
        (_item(S.BLOCKED, 2), "Which database?", None, S.BLOCKED, 2),  # a repeat: no change
        (_item(S.BLOCKED, 2), "Which database, really?", None, S.BLOCKED, 3),
        (_item(S.BLOCKED, 2), "Which database?", "new facts", S.BLOCKED, 3),
        (_item(S.DONE, 2), "Which database?", "new", S.BLOCKED, 3),  # reopened (versioned)
    ],
)
def test_reask_bumps_the_revision_only_on_change(
    item: InboxItem, question: str, context: str | None, state: ItemState, revision: int
) -> None:
    check_reask(item, 7, state, expected_revision=item.revision, expected_board_version=7)
    after = reasked(item, question, context, state)
    assert (after.question, after.context, after.state, after.revision) == (
        question,
        context,
        state,
        revision,
    )
    assert (after.id, after.key, after.reply) == (item.id, item.key, item.reply)


def test_reask_follows_the_transition_rules() -> None:
    read = {"expected_revision": 1, "expected_board_version": 7}
    with pytest.raises(InvalidInboxTransition):
        check_reask(_item(S.DONE), 7, S.MISSING, **read)
    with pytest.raises(InboxReplyPending):
        check_reask(_item(S.BLOCKED, reply=_reply()), 7, S.TRACKED, **read)
    check_reask(_item(S.BLOCKED, reply=_reply()), 7, S.BLOCKED)  # still the human's: fine


def test_a_reask_that_moves_the_state_is_versioned() -> None:
    """Seed 003: state changes only through versioned operations; the question alone may
    change without a version."""
    check_reask(_item(S.DONE, 4), 9, S.DONE)  # same state: no versions needed
    with pytest.raises(InboxVersionRequired) as missing:
        check_reask(_item(S.DONE, 4), 9, S.BLOCKED)
    assert (missing.value.revision, missing.value.board_version) == (4, 9)
    with pytest.raises(InboxConflict):  # read before the last change
        check_reask(_item(S.DONE, 4), 9, S.BLOCKED, expected_revision=3, expected_board_version=9)
    with pytest.raises(InboxConflict):  # the board moved since
        check_reask(_item(S.DONE, 4), 9, S.BLOCKED, expected_revision=4, expected_board_version=8)
    check_reask(_item(S.DONE, 4), 9, S.BLOCKED, expected_revision=4, expected_board_version=9)
    moved = reasked(_item(S.DONE, 4), "Which database now?", None, S.BLOCKED)
    assert (moved.state, moved.revision, moved.question) == (S.BLOCKED, 5, "Which database now?")


@pytest.mark.parametrize(
    ("meta", "state", "wake"),
    [
        (None, S.BLOCKED, False),
        ({}, S.BLOCKED, False),
        ({"inbox": {"wake_on_reply": True}}, S.BLOCKED, True),
        ({"inbox": {"wake_on_reply": True}}, S.TRACKED, False),
        ({"inbox": {"wake_on_reply": True}}, S.DONE, False),
        ({"inbox": {"wake_on_reply": False}}, S.BLOCKED, False),
        ({"inbox": {"wake_on_reply": "yes"}}, S.BLOCKED, False),  # only exactly true
        ({"inbox": "wake"}, S.BLOCKED, False),
        ({"other": 1, "inbox": {"wake_on_reply": True, "x": 2}}, S.BLOCKED, True),
    ],
)
def test_wake_on_reply_is_an_opt_in_for_blocked_items(
    meta: dict[str, object] | None, state: ItemState, wake: bool
) -> None:
    assert should_request_run(state, inbox_settings_from_meta(meta)) is wake


def test_default_settings_never_wake() -> None:
    assert not should_request_run(S.BLOCKED, InboxSettings())


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("db-choice", True),
        ("team/q3 budget", True),
        ("", False),
        (" padded", False),
        ("padded ", False),
        ("tab\there", False),
        ("x" * 200, True),
        ("x" * 201, False),
    ],
)
def test_key_validation(key: str, ok: bool) -> None:
    if ok:
        assert validate_key(key) == key
    else:
        with pytest.raises(InvalidInputError, match=r"^key: "):
            validate_key(key)


@pytest.mark.parametrize(("value", "ok"), [("fine", True), ("", False), ("  \n", False)])
def test_text_validation_names_the_field(value: str, ok: bool) -> None:
    if ok:
        assert validate_text("reply", value) == value
    else:
        with pytest.raises(InvalidInputError, match=r"^reply: must not be blank"):
            validate_text("reply", value)
    with pytest.raises(InvalidInputError, match=r"^outcome: at most 5 characters \(got 6\)"):
        validate_text("outcome", "x" * 6, limit=5)
