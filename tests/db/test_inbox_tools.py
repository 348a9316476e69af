"""The agent's inbox tools through the runner's toolbox, on the real database.

Calls go in as the model would send them (JSON argument strings) and come
back as the JSON the model reads; the database is the runner's own
`RunJournal`, so the transaction boundaries are the runner's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine

from achilles.db.database import Database
from achilles.domain.inbox import ReplyChannel
from achilles.services.run_journal import RunJournal
from achilles.tools.base import ToolContext
from achilles.tools.catalogue import select_tools
from achilles.tools.inbox import run_start_note
from tests.db import inbox_support as box
from tests.db.factories import make_agent

INBOX_TOOL_NAMES = {
    "inbox_ask",
    "inbox_answered",
    "inbox_acknowledge",
    "inbox_board",
    "inbox_advance",
}


@pytest.fixture
def run_db(database_url: str, db: Engine) -> Iterator[RunJournal]:
    database = Database(database_url)
    yield RunJournal(database)
    database.dispose()


def _ctx(run_db: RunJournal, agent_id: int) -> ToolContext:
    return ToolContext(
        run_id=1,
        agent_id=agent_id,
        owner_user_id=1,
        owner_timezone=ZoneInfo("UTC"),
        knowledge=run_db.knowledge_store(),
        transaction=run_db.database.transaction,
        now=lambda: datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
    )


def _call(ctx: ToolContext, name: str, **arguments: Any) -> Any:
    toolbox = select_tools(["inbox"]).toolbox
    return json.loads(toolbox.invoke(name, json.dumps(arguments), ctx))


def test_the_inbox_toolset_is_in_the_catalogue() -> None:
    selection = select_tools(["inbox"])
    assert selection.unknown == ()
    assert set(selection.toolbox.names) >= INBOX_TOOL_NAMES
    specs = {s["function"]["name"]: s for s in selection.toolbox.specs()}
    ask_params = specs["inbox_ask"]["function"]["parameters"]
    assert set(ask_params["required"]) == {"key", "question"}
    assert ask_params["properties"]["state"]["anyOf"][0]["enum"] == [
        "tracked",
        "partial",
        "missing",
        "na",
        "done",
        "blocked",
    ]


def test_ask_reply_answered_acknowledge_advance(db: Engine, run_db: RunJournal) -> None:
    agent_id = make_agent(db)
    ctx = _ctx(run_db, agent_id)

    asked = _call(ctx, "inbox_ask", key="db", question="Which database?")
    assert (asked["created"], asked["state"], asked["revision"], asked["board_version"]) == (
        True,
        "blocked",
        1,
        1,
    )
    again = _call(ctx, "inbox_ask", key="db", question="Which database?", context="Finance asks")
    assert (again["id"], again["revision"], again["changed"]) == (asked["id"], 2, True)

    assert _call(ctx, "inbox_answered") == {"answered": []}
    box.reply(db, asked["id"], "Postgres")  # a person answers in the inbox

    answered = _call(ctx, "inbox_answered")["answered"]
    assert [(a["id"], a["reply"]["text"], a["reply"]["serial"]) for a in answered] == [
        (asked["id"], "Postgres", 1)
    ]
    assert answered[0]["reply"]["seen_at"] is not None

    board = _call(ctx, "inbox_board")
    item = board["items"][0]

    def advance_as_read(state: str) -> Any:
        """`inbox_advance` with the revision and board version of the read above."""
        return _call(
            ctx,
            "inbox_advance",
            item_id=item["id"],
            expected_revision=item["revision"],
            board_version=board["board_version"],
            state=state,
        )

    refused = advance_as_read("done")
    assert "unprocessed human reply" in refused["error"]

    ack = _call(ctx, "inbox_acknowledge", item_id=item["id"], reply_serial=1, outcome="Used it")
    assert ack["status"] == "acknowledged"
    assert _call(ctx, "inbox_answered") == {"answered": []}

    moved = advance_as_read("done")
    assert (moved["state"], moved["revision"], moved["board_version"]) == (
        "done",
        item["revision"] + 1,
        board["board_version"] + 1,
    )

    stale = advance_as_read("tracked")
    assert f"Current revision {item['revision'] + 1}" in stale["error"]
    assert f"current board_version {board['board_version'] + 1}" in stale["error"]


def test_re_asking_moves_the_state_only_with_the_versions_read(
    db: Engine, run_db: RunJournal
) -> None:
    """Seed 003 (issue 18, item 8): a re-ask may reword the question; changing the
    state is versioned like inbox_advance, or refused with the versions to use."""
    ctx = _ctx(run_db, make_agent(db))
    asked = _call(ctx, "inbox_ask", key="db", question="Which database?", state="done")
    refused = _call(ctx, "inbox_ask", key="db", question="Which database now?", state="blocked")
    assert "needs expected_revision and board_version" in refused["error"]
    assert "revision 1, board version 1" in refused["error"]
    assert _call(ctx, "inbox_board")["items"][0]["state"] == "done"  # nothing written

    reworded = _call(ctx, "inbox_ask", key="db", question="Which database now?")
    assert (reworded["state"], reworded["revision"], reworded["changed"]) == ("done", 2, True)

    reopened = _call(
        ctx,
        "inbox_ask",
        key="db",
        question="Which database for 2027?",
        state="blocked",
        expected_revision=2,
        board_version=2,
    )
    assert (reopened["id"], reopened["state"], reopened["revision"]) == (asked["id"], "blocked", 3)


def test_superseded_acknowledgement_tells_the_agent_to_read_again(
    db: Engine, run_db: RunJournal
) -> None:
    agent_id = make_agent(db)
    ctx = _ctx(run_db, agent_id)
    item_id = _call(ctx, "inbox_ask", key="db", question="Which database?")["id"]
    box.reply(db, item_id, "Postgres")
    _call(ctx, "inbox_answered")
    box.reply(db, item_id, "No, MySQL")
    ack = _call(ctx, "inbox_acknowledge", item_id=item_id, reply_serial=1, outcome="Used it")
    assert ack["status"] == "superseded"
    assert "inbox_answered" in ack["hint"]
    assert [a["reply"]["text"] for a in _call(ctx, "inbox_answered")["answered"]] == ["No, MySQL"]


def test_an_agent_cannot_touch_another_agents_items(db: Engine, run_db: RunJournal) -> None:
    mine, theirs = make_agent(db), make_agent(db)
    their_item = box.ask(db, theirs).item
    box.reply(db, their_item.id)
    box.take(db, their_item.id)
    ctx = _ctx(run_db, mine)
    ack = _call(ctx, "inbox_acknowledge", item_id=their_item.id, reply_serial=1, outcome="x")
    assert ack == {"error": f"inbox item {their_item.id} does not exist"}
    moved = _call(
        ctx,
        "inbox_advance",
        item_id=their_item.id,
        expected_revision=2,
        board_version=2,
        state="na",
    )
    assert moved == {"error": f"inbox item {their_item.id} does not exist"}
    assert _call(ctx, "inbox_board") == {"board_version": 0, "items": []}
    assert box.raw_row(db, their_item.id)["outcome"] is None


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("inbox_ask", {"key": "k", "question": "q", "state": "waiting"}, "state: "),
        ("inbox_ask", {"key": " k", "question": "q"}, "key: must be non-empty"),
        ("inbox_ask", {"key": "k", "question": "   "}, "question: must not be blank"),
        ("inbox_ask", {"key": "k"}, "question: Field required"),
        ("inbox_acknowledge", {"item_id": 1, "reply_serial": 0, "outcome": "x"}, "reply_serial"),
        ("inbox_advance", {"item_id": 1, "expected_revision": 1, "board_version": 0}, "state"),
    ],
)
def test_bad_arguments_come_back_as_readable_errors(
    db: Engine, run_db: RunJournal, name: str, arguments: dict[str, Any], message: str
) -> None:
    result = _call(_ctx(run_db, make_agent(db)), name, **arguments)
    assert message in result["error"]


def test_run_start_offers_pending_replies_until_acknowledged(
    db: Engine, run_db: RunJournal
) -> None:
    agent_id = make_agent(db)
    ctx = _ctx(run_db, agent_id)
    assert run_start_note(ctx) is None
    item = box.ask(db, agent_id, key="db", question="Which database?").item
    box.reply(db, item.id, "Postgres 16", channel=ReplyChannel.CHAT)

    note = run_start_note(ctx)
    assert note is not None
    assert f"item_id={item.id} key='db' reply_serial=1" in note
    assert "reply: Postgres 16" in note
    assert "inbox_acknowledge" in note
    # The run that saw it crashed: the next run is offered the same reply.
    assert run_start_note(ctx) == note
    box.acknowledge(db, item.id, 1, "configured Postgres 16")
    assert run_start_note(ctx) is None
