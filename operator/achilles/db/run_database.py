"""The runner's database: one object with the few operations a run performs.

Each operation is its own short transaction, so a run's progress (tokens,
heartbeats) is durable as it goes and a crash loses at most the step in
flight. Every journal write is guarded by state (see `achilles.db.journal`):
False means the row is no longer `running` (reaped, or finished elsewhere) and
the runner must stop writing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from achilles.db import journal
from achilles.db.knowledge import PostgresKnowledgeStore
from achilles.db.run_context import claim_and_load
from achilles.db.session import make_engine, make_session_factory
from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import FailReason
from achilles.errors import DatabaseUnavailable

# Long enough for a useful traceback summary, short enough for a status column.
MAX_ERROR_CHARS = 4000


# A run must not hang on an unreachable database; the OS default is minutes.
CONNECT_TIMEOUT_SECONDS = 10


def with_connect_timeout(url: str, seconds: int = CONNECT_TIMEOUT_SECONDS) -> str:
    """The URL with libpq's `connect_timeout`, unless it already sets one."""
    parsed = make_url(url)
    if "connect_timeout" in parsed.query:
        return url
    return parsed.update_query_dict({"connect_timeout": str(seconds)}).render_as_string(
        hide_password=False
    )


class RunDatabase:
    def __init__(self, url: str, *, pool_size: int = 2) -> None:
        self._engine = make_engine(with_connect_timeout(url), pool_size=pool_size)
        self._sessions = make_session_factory(self._engine)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One transaction, committed when the block succeeds."""
        try:
            with self._sessions() as session, session.begin():
                yield session
        except OperationalError as exc:
            raise DatabaseUnavailable(f"database unreachable: {exc.orig}") from exc

    def knowledge_store(self) -> PostgresKnowledgeStore:
        return PostgresKnowledgeStore(self._sessions)

    def claim(self, run_id: int) -> RunSpec | None:
        with self.transaction() as session:
            return claim_and_load(session, run_id)

    def heartbeat(self, run_id: int) -> bool:
        with self.transaction() as session:
            return journal.record_heartbeat(session, run_id)

    def add_tokens(self, run_id: int, tokens: int) -> bool:
        with self.transaction() as session:
            return journal.add_tokens(session, run_id, tokens)

    def succeed(self, run_id: int, output: str) -> bool:
        with self.transaction() as session:
            return journal.succeed_run(session, run_id, output)

    def fail(self, run_id: int, reason: FailReason, error: str) -> bool:
        if len(error) > MAX_ERROR_CHARS:
            error = error[: MAX_ERROR_CHARS - 3] + "..."
        with self.transaction() as session:
            return journal.fail_run(session, run_id, reason, error)

    def close(self) -> None:
        self._engine.dispose()
