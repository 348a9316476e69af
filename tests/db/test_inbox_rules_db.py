"""Every inbox rule on the real database (seed 003, DESIGN.md §5), one writer at a time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.inbox import board as inbox
from achilles.db.inbox import replies as inbox_replies
from achilles.db.inbox.settings import load_inbox_settings, set_wake_on_reply
from achilles.domain.inbox import AckStatus, ItemState, ReplyChannel, ReplyKind
from achilles.errors import (
    InboxConflict,
    InboxReplyPending,
    InboxVersionRequired,
    InvalidInboxTransition,
    InvalidInputError,
    NotFound,
)
from tests.db import inbox_support as box
from tests.db.factories import make_agent
from tests.waiting import wait_for

S = ItemState
CHAT = ReplyChannel.CHAT


# --- one question, one row; revisions and the board version ---


def test_ask_creates_then_reasking_updates_the_same_row(db: Engine) -> None:
    agent_id = make_agent(db)
    first = box.ask(db, agent_id)
    assert (first.created, first.changed, first.item.revision, first.board_version) == (
        True,
        True,
        1,
        1,
    )
    assert first.item.state is S.BLOCKED

    again = box.ask(db, agent_id)  # the same question: nothing to write
    assert (again.created, again.changed, again.item.revision, again.board_version) == (
        False,
        False,
        1,
        1,
    )

    changed = box.ask(db, agent_id, context="The finance team moved to MySQL.")
    assert (changed.created, changed.changed) == (False, True)
    assert changed.item.id == first.item.id
    assert (changed.item.revision, changed.board_version) == (2, 2)
    assert changed.item.context == "The finance team moved to MySQL."

    assert [i.id for i in box.board(db, agent_id).items] == [first.item.id]


def test_keys_are_per_agent(db: Engine) -> None:
    a, b = make_agent(db), make_agent(db)
    item_a, item_b = box.ask(db, a).item, box.ask(db, b).item
    assert item_a.id != item_b.id
    assert (box.board(db, a).version, box.board(db, b).version) == (1, 1)


def test_the_database_refuses_a_second_row_for_a_key(db: Engine) -> None:
    agent_id = make_agent(db)
    box.ask(db, agent_id)
    with pytest.raises(Exception, match="uq_agent_inbox_items_agent_id_key"), db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_inbox_items (agent_id, key, state, question)"
                " VALUES (:a, 'db-choice', 'tracked', 'again?')"
            ),
            {"a": agent_id},
        )


def test_parallel_first_asks_of_one_key_make_one_row(db: Engine) -> None:
    agent_id = make_agent(db)
    writers = 16
    barrier = threading.Barrier(writers)

    def ask(index: int) -> inbox.AskResult:
        with Session(db) as session, session.begin():
            session.connection()
            barrier.wait(timeout=60)
            return inbox.ask(session, agent_id, "shared", "Same question?", f"context {index}")

    with ThreadPoolExecutor(max_workers=writers) as pool:
        results = list(pool.map(ask, range(writers)))
    assert sum(r.created for r in results) == 1
    assert len({r.item.id for r in results}) == 1
    assert sorted(r.item.revision for r in results) == list(range(1, writers + 1))
    final = box.board(db, agent_id)
    assert len(final.items) == 1
    assert (final.items[0].revision, final.version) == (writers, writers)


def test_ask_validates_and_needs_an_agent(db: Engine) -> None:
    agent_id = make_agent(db)
    with pytest.raises(InvalidInputError, match=r"^key: "):
        box.ask(db, agent_id, key=" spaced")
    with pytest.raises(InvalidInputError, match=r"^question: must not be blank"):
        box.ask(db, agent_id, question="   ")
    with pytest.raises(NotFound, match="agent 999999 does not exist"):
        box.ask(db, 999_999)
    with pytest.raises(NotFound):
        box.board(db, 999_999)
    assert box.board(db, agent_id).version == 0  # never written: an empty board


def test_reask_follows_the_transition_rules(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.DONE).item
    with pytest.raises(InvalidInboxTransition, match="from done to partial"):
        box.ask(db, agent_id, state=S.PARTIAL, expected_revision=1, board_version=1)
    reopened = box.ask(
        db, agent_id, context="New facts", state=S.BLOCKED, expected_revision=1, board_version=1
    )
    assert (reopened.item.state, reopened.item.revision) == (S.BLOCKED, 2)

    answered = box.reply(db, item.id)
    with pytest.raises(InboxReplyPending):
        box.ask(
            db,
            agent_id,
            state=S.TRACKED,
            expected_revision=answered.item.revision,
            board_version=answered.board_version,
        )
    still = box.ask(db, agent_id, context="Even newer facts")  # stays blocked: fine
    assert still.item.state is S.BLOCKED
    assert still.item.reply is not None  # re-asking never drops the human's reply
    assert still.item.reply.text == "Use Postgres"


def test_reask_changes_state_only_with_the_versions_it_read(db: Engine) -> None:
    """Seed 003: state changes only through versioned operations. Re-asking may update
    the question (revision + 1); a change of state is board_advance's compare-and-swap,
    or is refused and writes nothing (issue 18, item 8)."""
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.DONE).item
    before = box.raw_row(db, item.id)
    with pytest.raises(InboxVersionRequired, match="needs expected_revision") as refused:
        box.ask(db, agent_id, question="Which database, now?", state=S.BLOCKED)
    assert (refused.value.revision, refused.value.board_version) == (1, 1)
    assert box.raw_row(db, item.id) == before  # neither the question nor the state moved
    assert box.board(db, agent_id).version == 1

    # The question alone may change without a version; the state stays.
    reworded = box.ask(db, agent_id, question="Which database, now?", state=None)
    assert (reworded.item.state, reworded.item.revision, reworded.board_version) == (
        S.DONE,
        2,
        2,
    )
    with pytest.raises(InboxConflict):  # read before the rewording: stale
        box.ask(db, agent_id, state=S.BLOCKED, expected_revision=1, board_version=1)
    assert box.read(db, item.id)[0].state is S.DONE

    reopened = box.ask(
        db, agent_id, question="Which database for 2027?", state=S.BLOCKED,
        expected_revision=2, board_version=2,
    )  # fmt: skip
    assert (reopened.created, reopened.changed) == (False, True)
    assert (reopened.item.state, reopened.item.revision, reopened.board_version) == (
        S.BLOCKED,
        3,
        3,
    )
    assert reopened.item.question == "Which database for 2027?"


# --- board_advance: compare-and-swap on revision and board version ---


def test_advance_moves_and_bumps_both_versions(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.TRACKED).item
    result = box.advance(db, item.id, 1, 1, S.PARTIAL, context="Half the data is there")
    assert (result.item.state, result.item.revision, result.board_version) == (S.PARTIAL, 2, 2)
    assert result.item.context == "Half the data is there"
    kept = box.advance(db, item.id, 2, 2, S.DONE)
    assert kept.item.context == "Half the data is there"


@pytest.mark.parametrize(("revision", "board_version"), [(0, 1), (2, 1), (1, 0), (1, 2), (5, 5)])
def test_stale_or_wrong_versions_conflict_and_change_nothing(
    db: Engine, revision: int, board_version: int
) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.TRACKED).item
    before = box.raw_row(db, item.id)
    with pytest.raises(InboxConflict) as conflict:
        box.advance(db, item.id, revision, board_version, S.DONE)
    assert (conflict.value.current_revision, conflict.value.current_board_version) == (1, 1)
    assert box.raw_row(db, item.id) == before
    assert box.board(db, agent_id).version == 1


def test_any_change_on_the_board_fails_an_advance_from_an_older_read(db: Engine) -> None:
    agent_id = make_agent(db)
    mine = box.ask(db, agent_id, key="mine", state=S.TRACKED).item
    other = box.ask(db, agent_id, key="other").item
    read_item, read_version = box.read(db, mine.id)

    box.reply(db, other.id)  # a human answered a different question
    with pytest.raises(InboxConflict) as conflict:
        box.advance(db, mine.id, read_item.revision, read_version, S.DONE)
    assert conflict.value.current_revision == read_item.revision
    assert conflict.value.current_board_version == read_version + 1

    fresh_item, fresh_version = box.read(db, mine.id)
    assert box.advance(db, mine.id, fresh_item.revision, fresh_version, S.DONE).item.state is S.DONE


def test_a_reply_bumps_the_item_revision(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    written = box.reply(db, item.id)
    assert (written.item.revision, written.board_version) == (2, 2)
    with pytest.raises(InboxConflict):
        box.advance(db, item.id, 1, 2, S.NA)


def test_advance_refuses_forbidden_moves(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.DONE).item
    with pytest.raises(InvalidInboxTransition, match="from done to na"):
        box.advance(db, item.id, 1, 1, S.NA)
    with pytest.raises(InvalidInboxTransition, match="from done to done"):
        box.advance(db, item.id, 1, 1, S.DONE)
    assert box.read(db, item.id)[0].revision == 1


def test_a_blocked_item_stays_the_humans_until_the_reply_is_acknowledged(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    answered = box.reply(db, item.id)
    revision, version = answered.item.revision, answered.board_version
    with pytest.raises(InboxReplyPending):
        box.advance(db, item.id, revision, version, S.DONE)
    taken = box.take(db, item.id)
    assert taken is not None
    with pytest.raises(InboxReplyPending):
        box.advance(db, item.id, revision, version, S.DONE)
    assert box.acknowledge(db, item.id, taken.reply_serial) is AckStatus.ACKNOWLEDGED
    # Taking and acknowledging are bookkeeping: the versions read before still hold.
    done = box.advance(db, item.id, revision, version, S.DONE)
    assert done.item.state is S.DONE
    assert done.item.reply is not None
    assert done.item.reply.outcome == "used it"


def test_unknown_item_is_not_found(db: Engine) -> None:
    with pytest.raises(NotFound, match="inbox item 424242 does not exist"):
        box.advance(db, 424_242, 1, 1, S.DONE)
    with pytest.raises(NotFound):
        box.reply(db, 424_242)
    with pytest.raises(NotFound):
        box.take(db, 424_242)
    with pytest.raises(NotFound):
        box.acknowledge(db, 424_242, 1)


def test_a_conflict_leaves_the_callers_transaction_usable(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id, state=S.TRACKED).item
    with Session(db) as session, session.begin():
        with pytest.raises(InboxConflict):
            inbox.board_advance(
                session, item.id, expected_revision=9, board_version=1, target=S.DONE
            )
        inbox.board_advance(session, item.id, expected_revision=1, board_version=1, target=S.NA)
    assert box.read(db, item.id)[0].state is S.NA


def test_board_moving_after_the_item_was_won_undoes_the_item_write(db: Engine) -> None:
    """The window between the item UPDATE and the board UPDATE of `board_advance`.

    A reply to another item holds the board row, bumped but uncommitted. The
    advance wins its item (its snapshot still shows the old board version) and
    waits for the board; when the reply commits, the board CAS fails and the
    item write is rolled back: a conflict, and nothing changed.
    """
    agent_id = make_agent(db)
    mine = box.ask(db, agent_id, key="mine", state=S.TRACKED).item
    other = box.ask(db, agent_id, key="other").item
    revision, version = box.read(db, mine.id)

    with Session(db) as holder:
        holder.begin()
        inbox_replies.write_reply(holder, other.id, "hold", ReplyKind.ANSWER, ReplyChannel.INBOX)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(box.advance, db, mine.id, revision.revision, version, S.DONE)
            wait_for(
                lambda: _someone_waits_for_a_lock(db),
                timeout=60,
                what="the advance to wait for the board row",
            )
            assert box.raw_row(db, mine.id)["revision"] == 1  # not visible: uncommitted
            holder.commit()
            with pytest.raises(InboxConflict) as conflict:
                pending.result(timeout=60)
    assert conflict.value.current_board_version == version + 1
    after = box.raw_row(db, mine.id)
    assert (after["state"], after["revision"]) == ("tracked", 1)


def _someone_waits_for_a_lock(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    " AND query LIKE 'UPDATE agent_inbox_boards%'"
                )
            ).scalar_one()
        )


# --- the two reply channels ---


def test_inbox_reply_always_replaces_and_resets_the_reply_marks(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    first = box.reply(db, item.id, "Postgres")
    assert first.accepted
    assert first.item.reply is not None
    assert (first.item.reply.serial, first.item.reply.channel) == (1, ReplyChannel.INBOX)
    assert first.item.reply.handled_at is not None

    second = box.reply(db, item.id, "MySQL", kind=ReplyKind.CLARIFY)  # over an untaken reply
    assert second.accepted
    assert second.item.reply is not None
    assert (second.item.reply.text, second.item.reply.kind, second.item.reply.serial) == (
        "MySQL",
        ReplyKind.CLARIFY,
        2,
    )

    taken = box.take(db, item.id)
    assert taken is not None
    assert box.acknowledge(db, item.id, 2) is AckStatus.ACKNOWLEDGED
    third = box.reply(db, item.id, "Actually, SQLite")  # over a processed reply
    assert third.item.reply is not None
    assert (third.item.reply.seen_at, third.item.reply.outcome, third.item.reply.serial) == (
        None,
        None,
        3,
    )
    assert box.unprocessed(db, agent_id) == [item.id]


def test_chat_reply_is_written_only_over_no_reply_or_a_taken_one(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item

    first = box.reply(db, item.id, "from chat", channel=CHAT)
    assert first.accepted  # no reply yet
    assert first.item.reply is not None
    assert first.item.reply.channel is CHAT

    before = box.raw_row(db, item.id)
    refused = box.reply(db, item.id, "chat again", channel=CHAT)
    assert not refused.accepted  # the first one was not taken
    assert box.raw_row(db, item.id) == before  # not a byte changed, not even updated_at
    assert refused.item.reply is not None
    assert refused.item.reply.text == "from chat"

    box.take(db, item.id)
    over_taken = box.reply(db, item.id, "chat after take", channel=CHAT)
    assert over_taken.accepted
    assert over_taken.item.reply is not None
    assert (over_taken.item.reply.serial, over_taken.item.reply.seen_at) == (2, None)

    inbox_reply = box.reply(db, item.id, "from the inbox")
    assert inbox_reply.accepted
    assert not box.reply(db, item.id, "chat over inbox", channel=CHAT).accepted
    final_reply = box.read(db, item.id)[0].reply
    assert final_reply is not None
    assert final_reply.text == "from the inbox"


def test_replies_are_validated(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    with pytest.raises(InvalidInputError, match=r"^reply: must not be blank"):
        box.reply(db, item.id, "  ")


# --- take, acknowledge, and the unprocessed replies ---


def test_take_marks_the_reply_once(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    assert box.take(db, item.id) is None  # nothing to take
    box.reply(db, item.id)
    first = box.take(db, item.id)
    second = box.take(db, item.id)
    assert first is not None
    assert second is not None
    assert first.reply is not None
    assert second.reply is not None
    assert first.reply.seen_at is not None
    assert second.reply.seen_at == first.reply.seen_at  # idempotent
    assert (first.revision, box.board(db, agent_id).version) == (2, 2)  # no bumps
    box.acknowledge(db, item.id, first.reply_serial)
    assert box.take(db, item.id) is None  # processed: nothing left to take


def test_acknowledge_names_the_reply_it_processed(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    box.reply(db, item.id, "first")
    assert box.acknowledge(db, item.id, 1) is AckStatus.NOT_TAKEN
    taken = box.take(db, item.id)
    assert taken is not None
    box.reply(db, item.id, "second, after the take")
    assert box.acknowledge(db, item.id, 1) is AckStatus.SUPERSEDED
    assert box.unprocessed(db, agent_id) == [item.id]  # "second" is not lost
    assert box.take(db, item.id) is not None
    assert box.acknowledge(db, item.id, 2, "used the second") is AckStatus.ACKNOWLEDGED
    assert box.acknowledge(db, item.id, 2, "again") is AckStatus.ALREADY_ACKNOWLEDGED
    assert box.acknowledge(db, item.id, 3) is AckStatus.NO_SUCH_REPLY  # never came
    final = box.read(db, item.id)[0].reply
    assert final is not None
    assert final.outcome == "used the second"
    with pytest.raises(InvalidInputError, match=r"^outcome: "):
        box.acknowledge(db, item.id, 2, "")


def test_answered_but_not_processed_is_one_query(db: Engine) -> None:
    agent_id = make_agent(db)
    quiet = box.ask(db, agent_id, key="quiet").item
    answered = box.ask(db, agent_id, key="answered").item
    taken = box.ask(db, agent_id, key="taken").item
    done = box.ask(db, agent_id, key="done").item
    for item in (answered, taken, done):
        box.reply(db, item.id)
    box.take(db, taken.id)
    box.take(db, done.id)
    box.acknowledge(db, done.id, 1)
    elsewhere = box.ask(db, make_agent(db)).item
    box.reply(db, elsewhere.id)

    assert box.unprocessed(db, agent_id) == [answered.id, taken.id]
    assert quiet.id not in box.unprocessed(db, agent_id)
    with db.connect() as conn:
        plan = "\n".join(
            conn.execute(
                text(
                    "EXPLAIN SELECT id FROM agent_inbox_items WHERE agent_id = :a"
                    " AND handled_at IS NOT NULL AND outcome IS NULL"
                ),
                {"a": agent_id},
            ).scalars()
        )
    assert "agent_inbox_items" in plan


def test_an_agent_that_crashed_after_taking_finds_the_reply_again(db: Engine) -> None:
    agent_id = make_agent(db)
    item = box.ask(db, agent_id).item
    box.reply(db, item.id, "Postgres, please")

    # Run 1 takes the reply at run start, then dies before acknowledging.
    with Session(db) as session, session.begin():
        offered = inbox_replies.take_unprocessed_replies(session, agent_id)
    assert [i.id for i in offered] == [item.id]
    assert offered[0].reply is not None
    first_seen = offered[0].reply.seen_at

    # The row stays blocked with handled_at set and no outcome: findable.
    row = box.raw_row(db, item.id)
    assert (row["state"], row["outcome"]) == ("blocked", None)
    assert row["handled_at"] is not None
    assert box.unprocessed(db, agent_id) == [item.id]

    # Run 2 is offered the same reply (first take time kept) and finishes the job.
    with Session(db) as session, session.begin():
        again = inbox_replies.take_unprocessed_replies(session, agent_id)
    assert [i.id for i in again] == [item.id]
    assert again[0].reply is not None
    assert (again[0].reply.text, again[0].reply.seen_at) == ("Postgres, please", first_seen)
    assert box.acknowledge(db, item.id, again[0].reply_serial) is AckStatus.ACKNOWLEDGED
    assert box.unprocessed(db, agent_id) == []


def test_take_unprocessed_takes_only_this_agents_pending_replies(db: Engine) -> None:
    agent_id, other_agent = make_agent(db), make_agent(db)
    first = box.ask(db, agent_id, key="a").item
    second = box.ask(db, agent_id, key="b").item
    box.ask(db, agent_id, key="unanswered")
    other = box.ask(db, other_agent).item
    box.reply(db, second.id)
    box.reply(db, first.id)
    box.reply(db, other.id)
    with Session(db) as session, session.begin():
        offered = inbox_replies.take_unprocessed_replies(session, agent_id)
    assert [i.id for i in offered] == [second.id, first.id]  # oldest reply first
    assert all(i.reply is not None and i.reply.seen_at is not None for i in offered)
    assert box.raw_row(db, other.id)["reply_seen_at"] is None


# --- the owner's wake-on-reply setting ---


def test_wake_on_reply_lives_in_meta_without_touching_other_keys(db: Engine) -> None:
    agent_id = make_agent(db)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET meta = CAST(:m AS jsonb) WHERE id = :a"),
            {"m": '{"portal": {"colour": "blue"}, "inbox": "junk"}', "a": agent_id},
        )
    with Session(db) as session, session.begin():
        assert not load_inbox_settings(session, agent_id).settings.wake_on_reply
        assert set_wake_on_reply(session, agent_id, True).wake_on_reply
    with Session(db) as session, session.begin():
        loaded = load_inbox_settings(session, agent_id)
        assert loaded.settings.wake_on_reply
        assert not set_wake_on_reply(session, agent_id, False).wake_on_reply
    with db.connect() as conn:
        meta = conn.execute(text("SELECT meta FROM agents WHERE id = :a"), {"a": agent_id})
        assert meta.scalar_one() == {
            "portal": {"colour": "blue"},
            "inbox": {"wake_on_reply": False},
        }
    with Session(db) as session, session.begin(), pytest.raises(NotFound):
        set_wake_on_reply(session, 999_999, True)
