"""A runner whose database goes away between its claim and its model call waits for it and
carries its run to the end (`achilles chaos postgres-outage` stops PostgreSQL right as
runs start: 4 of 4 runs that outlasted the outage were lost, their runners exiting with
the rows `running`, then reaped as stale).

On a PostgreSQL server of this module's own, stopped and started again on its port as the
fault suite does. The runner is held in its start-up journal work (the inbox's start note,
which takes the owner's replies before the model call) by a row lock the test holds, so
the server stops exactly there, and it is started again once the runner says it waits
for it; the only waits are `wait_for` on what the database and the model server show, and
the runner's log lines.

A runner whose run ends while the database is away (its loop crashed on the journal's
write) records that end once the database is back, instead of exiting with the row
`running`."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from achilles.db import migrate
from achilles.db.database import Database
from achilles.db.inbox import board, replies
from achilles.db.journal.models import AgentRun
from achilles.db.journal.settings import database_now
from achilles.domain.inbox import ReplyChannel, ReplyKind
from achilles_dev import postgres
from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.runner_support import (
    RunnerProcess,
    add_model,
    add_tool,
    queue_run,
    run_row,
    serving,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.timeout(300)]

HELD = "answer"
SCRIPT = {
    "rules": [
        {
            "when": {"turn": 0},
            "reply": {
                "content": "outlasted it",
                "hold": HELD,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            },
        }
    ]
}


@pytest.fixture(scope="module")
def own_server() -> Iterator[postgres.LocalPostgres]:
    """A server this module may stop (the session's serves the other tests)."""
    data_dir = postgres.default_data_root() / f"outage-{uuid.uuid4().hex[:8]}"
    server = postgres.start_throwaway(data_dir)
    try:
        yield server
    finally:
        postgres.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def own_database(own_server: postgres.LocalPostgres) -> tuple[postgres.LocalPostgres, str]:
    """The server and the URL of a database of this test's own, migrated to the newest
    schema."""
    # Running, even if a test before this one failed while it was stopped.
    postgres.ensure_running(own_server.data_dir, own_server.port, durable=False)
    name = f"achilles_outage_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(own_server.libpq_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = own_server.url(name)
    database = Database(url)
    migrate.upgrade(database.engine)
    database.dispose()
    return own_server, url


def _waiting_on_the_inbox_lock(engine: Engine) -> bool:
    """The runner's start note (it takes the agent's inbox replies) waits for the reply's
    row lock: the runner is past its claim and the run's load, before its model call."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND application_name = 'achilles-runner'"
                    " AND query ILIKE 'UPDATE agent_inbox_items%'"
                )
            ).scalar_one()
        )


def _read_until(runner: RunnerProcess, said: str) -> str:
    """The runner's log up to the line saying `said` (it logs to stderr as it goes); fails
    if the runner exits first."""
    assert runner.process.stderr is not None
    read = ""
    for line in runner.process.stderr:
        read += line
        if said in line:
            return read
    raise AssertionError(f"the runner ended without saying {said!r}:\n{read}")


def _heartbeat_at(engine: Engine, run_id: int) -> datetime | None:
    with Session(engine) as session:
        return session.execute(
            select(AgentRun.heartbeat_at).where(AgentRun.id == run_id)
        ).scalar_one()


def test_a_database_gone_between_the_claim_and_the_model_call_is_waited_for_and_the_run_succeeds(
    own_database: tuple[postgres.LocalPostgres, str],
) -> None:
    server, url = own_database
    database = Database(url, pool_size=2)
    engine = database.engine
    try:
        load_demo_knowledge(engine)  # the owners (alice) and their knowledge
        with serving(SCRIPT) as model_server:
            inbox = add_tool(engine, "inbox", "inbox")
            run_id = queue_run(engine, owner="alice", model=add_model(engine, model_server),
                               tool_ids=[inbox])  # fmt: skip
            # A reply the run's start note takes (its first journal work after the load),
            # its row locked by the test (NO KEY UPDATE: the claim's reply-wake trigger
            # only takes a KEY SHARE of it, the note a FOR UPDATE): the note waits there.
            with Session(engine) as session, session.begin():
                agent_id = session.execute(
                    select(AgentRun.agent_id).where(AgentRun.id == run_id)
                ).scalar_one()
                item = board.ask(session, agent_id, "db", "Which database?").item
                replies.write_reply(
                    session, item.id, "Postgres 16", ReplyKind.ANSWER, ReplyChannel.INBOX
                )
            holder = engine.connect()
            holder.begin()
            holder.execute(
                text("SELECT id FROM agent_inbox_items WHERE id = :id FOR NO KEY UPDATE"),
                {"id": item.id},
            )
            runner = RunnerProcess(url, run_id, heartbeat=0.2)
            try:
                wait_for(lambda: _waiting_on_the_inbox_lock(engine), 60,
                         what="the runner's start note waiting on the inbox lock")  # fmt: skip
                # The outage: the server stopped (every session ended, the lock's too)
                # and started again on its port, as `achilles chaos postgres-outage` does.
                assert postgres.stop(server.data_dir)
                holder.invalidate()
                seen = _read_until(runner, "the run's start notes: database unreachable")
                postgres.ensure_running(server.data_dir, server.port, durable=False)
                with Session(engine) as session:
                    back_at = database_now(session)
                # The runner carried on: its model call, and its heartbeat beating again.
                wait_for(model_server.recorded, 60, what="the model call after the outage")
                wait_for(
                    lambda: (beat := _heartbeat_at(engine, run_id)) is not None and beat > back_at,
                    60,
                    what="a heartbeat after the database came back",
                )
                model_server.release(HELD)
                code = runner.wait()
            finally:
                runner.kill()
                holder.close()
        assert code == 0, seen + runner.log
        row = run_row(engine, run_id)
        assert (row.state, row.output, row.error) == ("succeeded", "outlasted it", None), (
            seen + runner.log
        )
    finally:
        database.dispose()


def test_a_run_that_ends_while_the_database_is_away_records_its_end_once_it_is_back(
    own_database: tuple[postgres.LocalPostgres, str],
) -> None:
    server, url = own_database
    database = Database(url, pool_size=2)
    engine = database.engine
    try:
        load_demo_knowledge(engine)
        with serving(SCRIPT) as model_server:
            run_id = queue_run(engine, owner="alice", model=add_model(engine, model_server))
            runner = RunnerProcess(url, run_id, heartbeat=0.2)
            try:
                wait_for(model_server.recorded, 60, what="the model call")
                # The database goes while the model thinks; the answer's write then fails,
                # the loop crashes, and the run's end waits for the database.
                assert postgres.stop(server.data_dir)
                model_server.release(HELD)
                seen = _read_until(runner, f"recording run {run_id}'s end: database unreachable")
                postgres.ensure_running(server.data_dir, server.port, durable=False)
                code = runner.wait()
            finally:
                runner.kill()
        row = run_row(engine, run_id)
        assert (row.state, row.reason) == ("failed", "error"), seen + runner.log
        assert row.error is not None
        assert "runner crashed" in row.error
        assert "database unreachable" in row.error
        assert row.finished_at is not None
        assert code == 1, seen + runner.log  # a crash, as any loop that crashed
    finally:
        database.dispose()
