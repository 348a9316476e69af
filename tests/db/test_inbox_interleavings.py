"""Hypothesis-driven interleavings of inbox operations, checked against the pure model.

Two agent-side actors keep their own (possibly stale) reads of the board and
the serials they took; humans reply on either channel. Hypothesis chooses the
interleaving; every step runs on the real database and on the pure model of the
rules (`tests.tools.inbox_oracle`), and the results and whole board must agree after
every step — refusals included, which must change nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import Engine

from achilles.db.inbox.board import AskResult
from achilles.domain.inbox import (
    InboxItem,
    ItemState,
    ReplyChannel,
    ReplyKind,
    acknowledge_status,
    check_advance,
    check_reask,
    has_unprocessed_reply,
)
from achilles.errors import AchillesError
from tests.db import inbox_support as box
from tests.db.factories import make_agent
from tests.tools.inbox_oracle import acknowledged, advanced, reasked, replied, taken

KEYS = st.sampled_from(["a", "b"])
ACTORS = st.sampled_from([0, 1])
STATES = st.sampled_from(list(ItemState))
NEVER = datetime.min.replace(tzinfo=UTC)


def _plain(item: InboxItem) -> InboxItem:
    """Rows compared without their bookkeeping timestamps."""
    return dataclasses.replace(item, created_at=None, updated_at=None)


class InboxMachine(RuleBasedStateMachine):
    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine
        self.agent_id = make_agent(engine)
        self.items: dict[str, InboxItem] = {}
        self.board_version = 0
        self.reads: dict[tuple[int, str], tuple[int, int]] = {}  # (actor, key) -> versions
        self.took: dict[tuple[int, str], int] = {}  # (actor, key) -> serial taken

    def _expect_error(self, check: object) -> type[AchillesError] | None:
        assert callable(check)
        try:
            check()
        except AchillesError as refused:
            return type(refused)
        return None

    @rule(
        actor=ACTORS,
        versioned=st.booleans(),
        key=KEYS,
        question=st.sampled_from(["Which database?", "Which region?"]),
        context=st.sampled_from([None, "facts 1", "facts 2"]),
        state=STATES,
    )
    def ask(
        self,
        actor: int,
        versioned: bool,
        key: str,
        question: str,
        context: str | None,
        state: ItemState,
    ) -> None:
        """Ask or re-ask; with `versioned`, carrying what `actor` last read (a change of an
        existing item's state needs it, seed 003)."""
        current = self.items.get(key)
        revision, version = (
            self.reads.get((actor, key), (None, None)) if versioned else (None, None)
        )

        def check() -> None:
            assert current is not None
            check_reask(
                current,
                self.board_version,
                state,
                expected_revision=revision,
                expected_board_version=version,
            )

        def ask() -> AskResult:
            return box.ask(
                self.engine,
                self.agent_id,
                key,
                question,
                context,
                state,
                expected_revision=revision,
                board_version=version,
            )

        error = None if current is None else self._expect_error(check)
        if error is not None:
            with pytest.raises(error):
                ask()
            return
        result = ask()
        if current is None:
            expected = InboxItem(
                id=result.item.id,
                agent_id=self.agent_id,
                key=key,
                state=state,
                question=question,
                context=context,
                revision=1,
            )
        else:
            expected = reasked(current, question, context, state)
        changed = expected != current
        self.board_version += changed
        assert (result.created, result.changed) == (current is None, changed)
        assert _plain(result.item) == expected
        assert result.board_version == self.board_version
        self.items[key] = expected
        if current is not None and expected.state is not current.state:
            self.reads[actor, key] = (result.item.revision, result.board_version)

    @rule(actor=ACTORS, key=KEYS)
    def read(self, actor: int, key: str) -> None:
        if key not in self.items:
            return
        item, version = box.read(self.engine, self.items[key].id)
        assert (_plain(item), version) == (self.items[key], self.board_version)
        self.reads[actor, key] = (item.revision, version)

    @rule(actor=ACTORS, key=KEYS, to_state=STATES, context=st.sampled_from([None, "moved on"]))
    def advance(self, actor: int, key: str, to_state: ItemState, context: str | None) -> None:
        target = to_state
        if (actor, key) not in self.reads:
            return
        revision, version = self.reads[actor, key]
        current = self.items[key]

        def check() -> None:
            check_advance(
                current,
                self.board_version,
                expected_revision=revision,
                expected_board_version=version,
                target=target,
            )

        error = self._expect_error(check)
        if error is not None:
            with pytest.raises(error):
                box.advance(self.engine, current.id, revision, version, target, context)
            return
        result = box.advance(self.engine, current.id, revision, version, target, context)
        self.items[key] = advanced(current, target, context)
        self.board_version += 1
        assert _plain(result.item) == self.items[key]
        assert result.board_version == self.board_version
        self.reads[actor, key] = (result.item.revision, result.board_version)

    @rule(
        key=KEYS,
        channel=st.sampled_from(list(ReplyChannel)),
        kind=st.sampled_from(list(ReplyKind)),
        text=st.sampled_from(["Postgres", "MySQL", "ask finance"]),
    )
    def reply(self, key: str, channel: ReplyChannel, kind: ReplyKind, text: str) -> None:
        if key not in self.items:
            return
        current = self.items[key]
        result = box.reply(self.engine, current.id, text, channel, kind)
        handled_at = result.item.reply.handled_at if result.item.reply else None
        expected = replied(current, text, kind, channel, handled_at) if handled_at else None
        assert result.accepted == (expected is not None)
        if expected is None:
            assert _plain(result.item) == current
            return
        self.items[key] = expected
        self.board_version += 1
        assert _plain(result.item) == expected
        assert result.board_version == self.board_version

    @rule(actor=ACTORS, key=KEYS)
    def take(self, actor: int, key: str) -> None:
        if key not in self.items:
            return
        current = self.items[key]
        result = box.take(self.engine, current.id)
        # The model takes "now" from the database, so a repeated take must keep the first time.
        now = result.reply.seen_at if result and result.reply and result.reply.seen_at else NEVER
        expected = taken(current, now)
        if expected is None:
            assert result is None
            return
        assert result is not None
        assert _plain(result) == expected
        self.items[key] = expected
        self.took[actor, key] = expected.reply_serial

    @rule(actor=ACTORS, key=KEYS, which=st.sampled_from(["mine", "current", "older", "newer"]))
    def acknowledge(self, actor: int, key: str, which: str) -> None:
        if key not in self.items:
            return
        current = self.items[key]
        serial = {
            "mine": self.took.get((actor, key), current.reply_serial),
            "current": current.reply_serial,
            "older": current.reply_serial - 1,
            "newer": current.reply_serial + 1,
        }[which]
        outcome = f"actor {actor} processed {serial}"
        status = box.acknowledge(self.engine, current.id, serial, outcome)
        assert status is acknowledge_status(current, serial)
        self.items[key] = acknowledged(current, serial, outcome)

    @invariant()
    def database_matches_the_model(self) -> None:
        board = box.board(self.engine, self.agent_id)
        assert board.version == self.board_version
        assert sorted(map(_plain, board.items), key=lambda i: i.id) == sorted(
            self.items.values(), key=lambda i: i.id
        )
        expected = sorted(
            (i for i in self.items.values() if has_unprocessed_reply(i)),
            key=lambda i: (i.reply.handled_at if i.reply else NEVER, i.id),
        )
        assert box.unprocessed(self.engine, self.agent_id) == [i.id for i in expected]


def test_interleavings_agree_with_the_model(db: Engine) -> None:
    class InboxMachineOnTheTestDatabase(InboxMachine):
        # hypothesis builds machines with no arguments; this one is bound to `db`.
        def __init__(self) -> None:
            super().__init__(db)

    run_state_machine_as_test(
        InboxMachineOnTheTestDatabase,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
