"""Timing and explaining the engine's own queries: transactions rolled back after a
measurement, the exact SQL a journal function sends, and its EXPLAIN (ANALYZE, BUFFERS)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import bindparam, event, text
from sqlalchemy.dialects.postgresql import ARRAY, TEXT
from sqlalchemy.orm import Session

from achilles.db.database import Database

T = TypeVar("T")
P = ParamSpec("P")


@contextmanager
def rolled_back(database: Database) -> Iterator[Session]:
    """A session whose transaction is rolled back at the end: a measurement leaves the
    data as it found it, so it can be repeated on the same rows."""
    session = database.sessions()
    try:
        # Check out and ping the connection and begin now, so a timing inside the block
        # measures the statements, not the pool.
        session.execute(text("SELECT 1"))
        yield session
    finally:
        session.rollback()
        session.close()


def timed(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[float, T]:
    """Seconds `work(*args, **kwargs)` took, and what it returned."""
    started = time.perf_counter()
    result = work(*args, **kwargs)
    return time.perf_counter() - started, result


def repeat_rolled_back(
    database: Database, repeats: int, work: Callable[[Session], object]
) -> list[float]:
    samples = []
    for attempt in range(repeats + 1):
        with rolled_back(database) as session:
            took = timed(work, session)[0]
        if attempt:  # the first one warms the statement cache
            samples.append(took)
    return samples


@contextmanager
def captured_sql(database: Database) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the engine sends inside the block, as (SQL, parameters)."""
    statements: list[tuple[str, Any]] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        statements.append((statement, parameters))

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(database.engine, "before_cursor_execute", record)


def shorten(sql: str, width: int = 120) -> str:
    """One line of a statement, for listing what a function sends."""
    line = " ".join(sql.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def explain(database: Database, statement: str, parameters: Any) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of one captured statement, in a rolled-back transaction
    (the statement really runs, an UPDATE included, and leaves nothing behind)."""
    with rolled_back(database) as session:
        connection = session.connection()
        rows = connection.exec_driver_sql(
            f"EXPLAIN (ANALYZE, BUFFERS, SETTINGS) {statement}", parameters
        ).all()
    return "\n".join(str(row[0]) for row in rows)


def captured(
    database: Database, work: Callable[[Session], object], contains: str
) -> tuple[str, Any]:
    """The statement containing `contains` that `work` sends (run once, rolled back)."""
    with captured_sql(database) as statements, rolled_back(database) as session:
        work(session)
    for sql, params in statements:
        if contains in sql:
            return sql, params
    raise LookupError(f"no statement containing {contains!r} among {len(statements)}")


def server_seconds(database: Database, statement: str, parameters: list[Any]) -> list[float]:
    """PostgreSQL's own execution time of `statement` for each parameter set (EXPLAIN
    ANALYZE without per-node timing, rolled back): the query's cost without the client's
    Python, driver and scheduling, which a loaded machine inflates most."""
    samples = []
    with rolled_back(database) as session:
        connection = session.connection()
        for params in parameters:
            connection.exec_driver_sql("SAVEPOINT bench_explain")
            rows = connection.exec_driver_sql(
                f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) {statement}", params
            ).all()
            connection.exec_driver_sql("ROLLBACK TO SAVEPOINT bench_explain")
            line = next(str(r[0]) for r in rows if str(r[0]).startswith("Execution Time"))
            samples.append(float(line.split(":")[1].split()[0]) / 1000)
    return samples


def plan_of(database: Database, work: Callable[[Session], object], contains: str) -> dict[str, Any]:
    """Run `work` once (rolled back), find the statement containing `contains`, explain it."""
    with captured_sql(database) as statements, rolled_back(database) as session:
        work(session)
    matching = [(sql, params) for sql, params in statements if contains in sql]
    if not matching:
        raise LookupError(f"no statement containing {contains!r} among {len(statements)}")
    sql, params = matching[0]
    return {
        "sql": " ".join(sql.split()),
        "parameters": {k: str(v) for k, v in (params or {}).items()}
        if isinstance(params, dict)
        else str(params),
        "plan": explain(database, sql, params),
    }


def table_sizes(database: Database, tables: Sequence[str]) -> dict[str, str]:
    """Each table's size with its indexes and TOAST, as PostgreSQL prints it."""
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
                "WHERE relname = ANY(:tables) AND relkind = 'r' ORDER BY relname"
            ).bindparams(bindparam("tables", type_=ARRAY(TEXT))),
            {"tables": list(tables)},
        ).all()
    return {row[0]: row[1] for row in rows}
