"""Many truly parallel inbox writers against a real database, checked against the rules.

Each round, every writer opens its own connection, reads what it needs (an
advance reads the item and board versions), waits at a barrier so all start
together, then commits one operation: an inbox reply, a chat reply, a take,
a take by an agent that then "crashes" (never acknowledges), an
acknowledgement of a reply it took earlier, a re-ask, or a `board_advance`.
What each writer was told is recorded as an `Event`; at the end the final rows
and the events go through `tests.tools.inbox_history.check_history`.

Used by `tests/db/test_inbox_race.py` and by `python -m tests.tools.inbox_race` (the
same check from a shell). Human replies can be routed through another implementation
(e.g. the `achilles inbox reply` command) via `reply_writer`.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from achilles.db.inbox import board as inbox
from achilles.db.inbox import replies as inbox_replies
from achilles.db.inbox.models import InboxItemRow
from achilles.db.journal.agents import create_agent
from achilles.db.journal.models import User
from achilles.db.journal.users import upsert_user
from achilles.domain.inbox import (
    ALLOWED_TRANSITIONS,
    AckStatus,
    ItemState,
    ReplyChannel,
    ReplyKind,
    has_unprocessed_reply,
)
from achilles.errors import InboxConflict, InboxReplyPending, InvalidInboxTransition
from tests.tools.inbox_history import Event, Op, Snapshot, check_history

# What a writer does in a round, and how often (crash = take and never acknowledge).
# "advance" is one stale compare-and-swap; "process" is an agent's loop: re-read, take
# and acknowledge a pending reply, advance, and start over after every refusal.
_OPS: list[tuple[str, int]] = [
    ("inbox_reply", 5),
    ("chat_reply", 5),
    ("take", 2),
    ("crash", 1),
    ("ack", 3),
    ("advance", 3),
    ("process", 4),
    ("ask", 1),
]
_PROCESS_ATTEMPTS = 8
_BARRIER_TIMEOUT_S = 120.0

# (session of the writer, agent id, item id, reply text, channel) -> what the writer was told
ReplyWriter = Callable[[Session, int, int, str, ReplyChannel], Event]


@dataclass
class RaceReport:
    agents: list[int]
    items: list[int]
    events: list[Event]
    problems: list[str]
    unprocessed: set[int] = field(default_factory=set)

    def count(self, op: Op, *, ok: bool) -> int:
        return sum(1 for e in self.events if e.op is op and e.ok is ok)


def prepare_board(engine: Engine, *, agents: int, items_per_agent: int) -> tuple[str, list[int]]:
    """A throw-away owner with agents whose boards hold blocked questions."""
    owner = f"inbox-race-{uuid.uuid4().hex[:8]}"
    agent_ids: list[int] = []
    with Session(engine) as session, session.begin():
        upsert_user(session, owner, timezone=None, active=True)
        for a in range(agents):
            agent_id = create_agent(session, owner_key=owner, name=f"{owner}-{a}", prompt="race")
            agent_ids.append(agent_id)
            for k in range(items_per_agent):
                inbox.ask(session, agent_id, f"q{k}", f"Question {k} of agent {a}?")
    return owner, agent_ids


def remove_owner(engine: Engine, owner: str) -> None:
    """Deleting the owner cascades to its agents, boards and items."""
    with Session(engine) as session, session.begin():
        session.execute(delete(User).where(User.key == owner))


def snapshot(engine: Engine, agent_ids: list[int]) -> tuple[Snapshot, set[int]]:
    with Session(engine) as session, session.begin():
        boards = {a: inbox.read_board(session, a) for a in agent_ids}
        unprocessed = {
            item.id
            for a in agent_ids
            for item in inbox_replies.list_unprocessed_replies(session, a)
        }
    items = {item.id: item for board in boards.values() for item in board.items}
    return Snapshot(
        items=items, board_versions={a: b.version for a, b in boards.items()}
    ), unprocessed


def in_process_reply(
    session: Session, agent_id: int, item_id: int, text: str, channel: ReplyChannel
) -> Event:
    with session.begin():
        result = inbox_replies.write_reply(session, item_id, text, ReplyKind.ANSWER, channel)
    return reply_event(agent_id, channel, text, result)


def reply_event(
    agent_id: int, channel: ReplyChannel, text: str, result: inbox_replies.ReplyWrite
) -> Event:
    op = Op.INBOX_REPLY if channel is ReplyChannel.INBOX else Op.CHAT_REPLY
    return Event(
        op=op,
        item_id=result.item.id,
        agent_id=agent_id,
        ok=result.accepted,
        revision=result.item.revision if result.accepted else None,
        board_version=result.board_version if result.accepted else None,
        serial=result.item.reply_serial,
        text=text,
        state=result.item.state,
        detail="" if result.accepted else "refused: an untaken reply is there",
    )


class _Writer:
    """One writer's memory across rounds: the replies it took and may acknowledge."""

    def __init__(self, index: int, engine: Engine, reply: ReplyWriter, rng: random.Random) -> None:
        self.index = index
        self.engine = engine
        self.reply = reply
        self.rng = rng
        self.taken: dict[int, tuple[int, int]] = {}  # item -> (agent, serial)
        self.serial = 0

    def run(self, op: str, agent_id: int, item_id: int, barrier: threading.Barrier) -> list[Event]:
        self.serial += 1
        token = f"w{self.index}-{self.serial}"
        # A connection of our own, held from before the start line to the end.
        with self.engine.connect() as connection, Session(bind=connection) as session:
            try:
                connection.exec_driver_sql("SELECT 1")
                connection.commit()
                read = self._read_for_advance(session, item_id) if op == "advance" else None
            except BaseException:
                barrier.abort()  # release the others now rather than at the timeout
                raise
            barrier.wait(timeout=_BARRIER_TIMEOUT_S)
            if read is not None:
                return [self._advance(session, agent_id, item_id, *read)]
            if op == "process":
                return self._process(session, agent_id, item_id, token)
            if op in ("inbox_reply", "chat_reply"):
                channel = ReplyChannel.INBOX if op == "inbox_reply" else ReplyChannel.CHAT
                return [self.reply(session, agent_id, item_id, token, channel)]
            if op == "ask":
                return [self._reask(session, agent_id, item_id, token)]
            if op == "ack" and self.taken:
                acked_item, (acked_agent, serial) = self.taken.popitem()
                return [self._acknowledge(session, acked_agent, acked_item, serial, token)]
            return [self._take(session, agent_id, item_id, crash=op == "crash")]

    def _process(self, session: Session, agent_id: int, item_id: int, token: str) -> list[Event]:
        """What an agent does with one item: process the human's reply, then move on."""
        events: list[Event] = []
        for _ in range(_PROCESS_ATTEMPTS):
            with session.begin():
                item, version = inbox.get_item_and_board_version(session, item_id)
            if has_unprocessed_reply(item):
                take = self._take(session, agent_id, item_id, crash=False)
                events.append(take)
                if take.ok and take.serial is not None:
                    self.taken.pop(item_id, None)
                    events.append(self._acknowledge(session, agent_id, item_id, take.serial, token))
                continue
            target = self.rng.choice(sorted(ALLOWED_TRANSITIONS[item.state]))
            events.append(self._advance(session, agent_id, item_id, item.revision, version, target))
            if events[-1].ok:
                break
        return events

    def _read_for_advance(self, session: Session, item_id: int) -> tuple[int, int, ItemState]:
        with session.begin():
            item, version = inbox.get_item_and_board_version(session, item_id)
        return item.revision, version, self.rng.choice(sorted(ALLOWED_TRANSITIONS[item.state]))

    def _reask(self, session: Session, agent_id: int, item_id: int, token: str) -> Event:
        with session.begin():
            return self._reask_in(session, agent_id, item_id, token)

    def _reask_in(self, session: Session, agent_id: int, item_id: int, token: str) -> Event:
        key, question = session.execute(
            select(InboxItemRow.key, InboxItemRow.question).where(InboxItemRow.id == item_id)
        ).one()
        # Re-asking updates the context and keeps the state (a change of state is an
        # advance, which the other writers race with already).
        result = inbox.ask(session, agent_id, key, question, context=token, state=None)
        return Event(
            op=Op.ASK,
            item_id=item_id,
            agent_id=agent_id,
            ok=result.changed,
            revision=result.item.revision,
            board_version=result.board_version,
            state=result.item.state,
        )

    def _acknowledge(
        self, session: Session, agent_id: int, item_id: int, serial: int, token: str
    ) -> Event:
        outcome = f"{token} outcome {serial}"
        with session.begin():
            ack = inbox_replies.acknowledge(session, item_id, serial, outcome)
        return Event(
            op=Op.ACK,
            item_id=item_id,
            agent_id=agent_id,
            ok=ack.status is AckStatus.ACKNOWLEDGED,
            serial=serial,
            text=outcome,
            detail=ack.status.value,
        )

    def _take(self, session: Session, agent_id: int, item_id: int, *, crash: bool) -> Event:
        with session.begin():
            item = inbox_replies.take_reply(session, item_id)
        if item is not None and not crash:
            self.taken[item_id] = (agent_id, item.reply_serial)
        return Event(
            op=Op.TAKE,
            item_id=item_id,
            agent_id=agent_id,
            ok=item is not None,
            serial=item.reply_serial if item else None,
            revision=item.revision if item else None,
            detail="crashed before acknowledging" if crash else "",
        )

    def _advance(
        self,
        session: Session,
        agent_id: int,
        item_id: int,
        revision: int,
        version: int,
        target: ItemState,
    ) -> Event:
        base = Event(
            op=Op.ADVANCE,
            item_id=item_id,
            agent_id=agent_id,
            ok=False,
            expected_revision=revision,
            expected_board_version=version,
            state=target,
        )
        try:
            with session.begin():
                result = inbox.board_advance(
                    session,
                    item_id,
                    expected_revision=revision,
                    board_version=version,
                    target=target,
                )
        except (InboxConflict, InvalidInboxTransition, InboxReplyPending) as refused:
            return replace(base, detail=type(refused).__name__)
        return replace(
            base, ok=True, revision=result.item.revision, board_version=result.board_version
        )


def run_race(
    engine: Engine,
    agent_ids: list[int],
    *,
    writers: int = 32,
    rounds: int = 5,
    seed: int = 0,
    reply_writer: ReplyWriter | None = None,
    opening: tuple[str, ...] = (),
) -> RaceReport:
    """Run `rounds` rounds of `writers` simultaneous operations and check the history.

    `opening` names rounds played before the random ones in which every writer does
    the same operation, the writers spread evenly over the items: ("inbox_reply",
    "crash") makes sure replies exist and are taken by agents that crash, whatever
    the random rounds then draw.
    """
    rng = random.Random(seed)
    before, _ = snapshot(engine, agent_ids)
    targets = sorted((item.agent_id, item.id) for item in before.items.values())
    reply = reply_writer or in_process_reply
    pool = [_Writer(i, engine, reply, random.Random(rng.random())) for i in range(writers)]
    names, weights = zip(*_OPS, strict=True)
    events: list[Event] = []
    with ThreadPoolExecutor(max_workers=writers) as executor:
        openings = [
            [(w, op, targets[i % len(targets)]) for i, w in enumerate(pool)] for op in opening
        ]
        randoms = (
            [(w, rng.choices(names, weights)[0], rng.choice(targets)) for w in pool]
            for _ in range(rounds)
        )
        for plan in [*openings, *randoms]:
            barrier = threading.Barrier(writers)
            futures = [
                executor.submit(w.run, op, agent_id, item_id, barrier)
                for w, op, (agent_id, item_id) in plan
            ]
            events += [event for f in futures for event in f.result()]
    after, unprocessed = snapshot(engine, agent_ids)
    problems = check_history(before, events, after, unprocessed)
    return RaceReport(
        agents=agent_ids,
        items=sorted(after.items),
        events=events,
        problems=problems,
        unprocessed=unprocessed,
    )
