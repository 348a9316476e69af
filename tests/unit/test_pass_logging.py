"""How a loop's failed pass is logged (runtime/loops.py, `Passes`, with the operator's
`expected`: handlers/context.py): the database away is one warning line, no traceback,
at every retry while it lasts; any other error keeps its traceback. The lost LISTEN
connection on the real database: tests/db/test_listener_reconnects.py."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from achilles.db.database import Database, outage
from achilles.errors import DatabaseUnavailable
from achilles.handlers.context import (
    SIBLING_BATCH,
    SIBLING_REFRESH_SECONDS,
    StatusMarks,
    operator_passes,
)
from achilles.handlers.controllers import listener
from achilles.handlers.signals import Happened
from achilles.handlers.statuses import StatusQueue
from achilles.runtime.manager import LoopHandle
from tests.unit.test_loop_retries import Failing, Recorded


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port bound and not listening: a connection to it is refused at once."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def _failures(caplog: pytest.LogCaptureFixture, loop: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(f"{loop} pass failed")]


def test_a_refused_database_is_one_warning_line_per_failed_pass(
    refusing_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "achilles.operator")
    database = Database(f"postgresql+psycopg://achilles@127.0.0.1:{refusing_port}/achilles")
    heard: list[Happened] = []
    marks = StatusMarks(StatusQueue(SIBLING_REFRESH_SECONDS, SIBLING_BATCH), heard.append)
    stop = threading.Event()
    loop = LoopHandle(
        listener.NAME, stop, Recorded(stop, waits=2), operator_passes(), listener.RETRY
    )
    listener.run(listener.Listener(database, heard.append, marks), loop)
    assert heard == []  # never connected
    logged = _failures(caplog, listener.NAME)
    assert len(logged) == 2
    for record in logged:
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        said = record.getMessage()
        assert said.startswith("listener pass failed: database unreachable: ")
        assert said.endswith("; tried again after its backoff")
        assert "\n" not in said


def test_an_unexpected_error_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "achilles.operator")
    stop = threading.Event()
    reconcile = Failing([KeyError("agent 7")])
    LoopHandle("scheduler", stop, Recorded(stop, waits=1), operator_passes()).drive(reconcile)
    (logged,) = _failures(caplog, "scheduler")
    assert logged.levelno == logging.ERROR
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], KeyError)


def _mapped(orig: Exception) -> DatabaseUnavailable:
    """`orig` as `Database.transaction` raises it: SQLAlchemy's wrap, then ours."""
    wrapped = OperationalError("SELECT 1", {}, orig)
    try:
        raise DatabaseUnavailable(f"database unreachable: {orig}") from wrapped
    except DatabaseUnavailable as exc:
        return exc


def test_what_counts_as_the_database_away() -> None:
    lost = psycopg.OperationalError("server closed the connection unexpectedly\n\tThis...")
    assert outage(lost) == "database unreachable: server closed the connection unexpectedly This..."
    restarting = psycopg.errors.AdminShutdown("terminating connection")
    assert outage(restarting) == "database unreachable: terminating connection"
    assert outage(OperationalError("SELECT 1", {}, restarting)) == outage(restarting)
    assert outage(_mapped(restarting)) == "database unreachable: terminating connection"
    # A statement's timeout is a slow statement, worth its traceback.
    timed_out = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    assert outage(timed_out) is None
    assert outage(_mapped(timed_out)) is None
    assert outage(psycopg.errors.UniqueViolation("duplicate key")) is None
    assert outage(KeyError("agent 7")) is None
