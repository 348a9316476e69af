"""Truly parallel inbox writers (≥ 32 connections, started together), checked against the rules.

Each round every writer holds its own connection, waits at a barrier and then
commits an inbox reply, a chat reply, a take (some "crash" and never
acknowledge), an acknowledgement, a re-ask, a stale compare-and-swap advance,
or an agent's process-and-advance loop. `tests.tools.inbox_history`
checks what every writer was told and the final rows: no lost inbox reply,
no chat reply over an untaken one, never two CAS winners for one revision,
and crashed takes stay unprocessed replies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.inbox.board import get_item_and_board_version
from achilles.db.inbox.replies import ReplyWrite
from achilles.domain.inbox import ReplyChannel
from tests.tools.inbox_history import Event, Op
from tests.tools.inbox_writers import prepare_board, reply_event, run_race

WRITERS = 36
ROUNDS = 8


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parallel_writers_obey_every_rule(db: Engine, seed: int) -> None:
    _, agents = prepare_board(db, agents=4, items_per_agent=2)
    # The opening rounds make both sides of the rules happen whatever the draw: stale
    # compare-and-swaps, accepted inbox replies, chat replies refused over them, takes
    # and acknowledgements; the random rounds then mix everything.
    report = run_race(
        db,
        agents,
        writers=WRITERS,
        rounds=ROUNDS,
        seed=seed,
        opening=("advance", "inbox_reply", "chat_reply", "process"),
    )

    assert report.problems == []
    outcomes = Counter((e.op, e.ok) for e in report.events)
    details = Counter(e.detail for e in report.events)
    # The race really raced: every rule was exercised on both of its sides.
    assert outcomes[Op.INBOX_REPLY, True] > 0
    assert outcomes[Op.INBOX_REPLY, False] == 0
    assert outcomes[Op.CHAT_REPLY, False] > 0
    assert any(e.op is Op.CHAT_REPLY and e.ok and (e.serial or 0) > 1 for e in report.events)
    assert outcomes[Op.ADVANCE, True] > 0
    assert details["InboxConflict"] > 0
    assert details["acknowledged"] > 0
    assert sum(1 for e in report.events if e.op is Op.TAKE) > 0


def test_crashed_takes_stay_findable(db: Engine) -> None:
    _, agents = prepare_board(db, agents=2, items_per_agent=2)
    # Opening rounds make sure agents do take replies and crash; a random draw alone
    # may leave no reply for the few "crash" writers to take.
    report = run_race(
        db, agents, writers=WRITERS, rounds=ROUNDS, seed=7, opening=("inbox_reply", "crash")
    )
    assert report.problems == []
    with db.connect() as conn:
        rows = {
            row.id: row
            for row in conn.execute(
                text(
                    "SELECT id, reply_serial, reply_seen_at, outcome FROM agent_inbox_items"
                    " WHERE id = ANY(:ids)"
                ),
                {"ids": report.items},
            )
        }
    crashed = [e for e in report.events if e.op is Op.TAKE and e.ok and "crashed" in e.detail]
    assert crashed
    for event in crashed:
        row = rows[event.item_id]
        if row.reply_serial == event.serial and row.outcome is None:
            assert row.reply_seen_at is not None
            assert event.item_id in report.unprocessed


def test_the_checker_catches_a_chat_reply_that_ignores_the_rule(db: Engine) -> None:
    """Guard for the guard: a broken chat channel in the same race is reported."""
    _, agents = prepare_board(db, agents=1, items_per_agent=1)

    def unconditional_chat(
        session: Session, agent_id: int, item_id: int, text_: str, channel: ReplyChannel
    ) -> Event:
        with session.begin():
            session.execute(
                text(
                    "UPDATE agent_inbox_items SET reply = :t, reply_kind = 'answer',"
                    " reply_channel = :c, reply_serial = reply_serial + 1,"
                    " handled_at = now(), reply_seen_at = NULL, outcome = NULL,"
                    " revision = revision + 1 WHERE id = :id"
                ),
                {"t": text_, "c": channel.value, "id": item_id},
            )
            version = session.execute(
                text(
                    "UPDATE agent_inbox_boards SET board_version = board_version + 1"
                    " WHERE agent_id = :a RETURNING board_version"
                ),
                {"a": agent_id},
            ).scalar_one()
            item, _ = get_item_and_board_version(session, item_id)
        return reply_event(agent_id, channel, text_, ReplyWrite(item=item, board_version=version))

    report = run_race(
        db, agents, writers=WRITERS, rounds=4, seed=11, reply_writer=unconditional_chat
    )
    assert any("which nobody had taken" in problem for problem in report.problems)


REPOSITORY = Path(__file__).parents[2]


def _race_tool(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m tests.tools.inbox_race` as a person runs it, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "tests.tools.inbox_race", *args],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={**os.environ, "ACHILLES_DATABASE_URL": database_url},
        timeout=300,
        check=False,
    )


def test_the_race_tool_checks_the_rules_from_a_shell(db: Engine, database_url: str) -> None:
    result = _race_tool(database_url, "--writers", "32", "--rounds", "3", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["problems"] == []
    assert summary["operations"] >= 32 * 3
    with db.connect() as conn:  # the throw-away owner is gone again
        left = conn.execute(
            text("SELECT count(*) FROM users WHERE key = :k"), {"k": summary["owner"]}
        )
        assert left.scalar_one() == 0


@pytest.mark.parametrize("name", ["achilles", "production", "achilles_prod_test"])
def test_the_race_tool_refuses_a_database_that_is_not_a_scratch_one(
    database_url: str, name: str
) -> None:
    url = database_url.rsplit("/", 1)[0] + f"/{name}"
    result = _race_tool(url)
    assert result.returncode == 2
    assert f"refusing to race database {name!r}" in result.stderr
    assert "scratch" in result.stderr


def test_the_product_has_no_race_command(database_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "achilles", "inbox", "race", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "No such command 'race'" in result.stderr
