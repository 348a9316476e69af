"""The one database handle of a process: one Engine, one pool, one error mapping.

Every entry point (the CLI, the runner, the operator) opens a `Database` once and
passes it down; services open transactions on it with `with database.transaction()
as session:`, and the db layer's query functions take that session (the caller owns
the transaction). A connection failure becomes `DatabaseUnavailable` with libpq's
message on one line, a malformed URL `InvalidInputError`, and a query on a database
that was never migrated `SchemaError`, wherever they happen. `Session` is exported for
the services and tools that take the caller's transaction: they name its type from here
and import no sqlalchemy (pyproject.toml's import contracts).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import psycopg
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session as Session
from sqlalchemy.orm import sessionmaker

from achilles.db import driver_errors
from achilles.db.url_text import SCHEMES, URL_EXAMPLE, database_url_from_env, redacted
from achilles.errors import DatabaseUnavailable, InvalidInputError, SchemaError

CONNECT_TIMEOUT_SECONDS = driver_errors.CONNECT_TIMEOUT_SECONDS


def parse_url(url: str) -> URL:
    """A PostgreSQL URL pinned to the psycopg 3 driver; `postgres://` is accepted too
    (hosted offers hand those out). Anything libpq would not take is an
    `InvalidInputError` saying why, with the password masked."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise InvalidInputError(
            f"not a PostgreSQL URL (got {redacted(url)!r}; e.g. {URL_EXAMPLE})"
        ) from exc
    if parsed.drivername not in SCHEMES:
        raise InvalidInputError(
            f"{parsed.drivername}:// is not supported (got {redacted(url)!r});"
            f" use a PostgreSQL URL, e.g. {URL_EXAMPLE}"
        )
    parsed = parsed.set(drivername="postgresql+psycopg")
    _check_connection_options(parsed)
    return parsed


def _check_connection_options(url: URL) -> None:
    """libpq refuses unknown options (`?sslmod=...`) only when it connects, as a
    programming error; say so up front instead."""
    from psycopg.conninfo import make_conninfo

    try:
        make_conninfo("", **{key: str(value) for key, value in url.query.items()})
    except psycopg.ProgrammingError as exc:
        raise InvalidInputError(
            f"{exc} (got {url.render_as_string(hide_password=True)!r})"
        ) from exc


def normalise_url(url: str) -> str:
    return parse_url(url).render_as_string(hide_password=False)


def with_connect_timeout(url: str, seconds: int = CONNECT_TIMEOUT_SECONDS) -> str:
    """The URL with libpq's `connect_timeout`, unless it already sets one."""
    parsed = parse_url(url)
    if "connect_timeout" in parsed.query:
        return url
    return (
        make_url(url)
        .update_query_dict({"connect_timeout": str(seconds)})
        .render_as_string(hide_password=False)
    )


def unavailable(exc: OperationalError | DisconnectionError) -> DatabaseUnavailable:
    """The connection failure on one line. `DisconnectionError` is the pool's own (no
    driver error inside): `InvalidatePoolError` when the pool was invalidated (the
    database lost) while this thread held one of its connections."""
    if isinstance(exc, OperationalError):
        return driver_errors.unreachable(exc.orig or exc)
    return driver_errors.unreachable(exc)


def schema_behind(exc: ProgrammingError) -> SchemaError | None:
    return driver_errors.schema_behind(exc.orig or exc)


def outage(error: BaseException) -> str | None:
    """What `error` says of the database being away, on one line ("database unreachable:
    ..."), when it says so: a connection refused or lost (the database restarting), as
    `DatabaseUnavailable` or the driver's OperationalError (psycopg's own, as a LISTEN
    connection raises it, or SQLAlchemy's), or the pool's `DisconnectionError`. None for
    any other error, a statement cancelled included (its timeout: a slow statement, not
    an outage)."""
    driver = error.__cause__ if isinstance(error, DatabaseUnavailable) else error
    if isinstance(driver, OperationalError):
        driver = driver.orig or driver
    if isinstance(driver, psycopg.errors.QueryCanceled):
        return None
    if isinstance(error, DatabaseUnavailable):
        return str(error)
    if isinstance(driver, psycopg.OperationalError | OperationalError | DisconnectionError):
        return str(driver_errors.unreachable(driver))
    return None


class Database:
    """One Engine and its pool for the life of the process."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 5,
        application_name: str = "achilles",
        session_settings: Mapping[str, str] | None = None,
        pre_ping: bool = True,
    ):
        """`session_settings`: server settings every connection starts with (libpq's
        `options`, so they are set before any statement and never appear in one).

        `pre_ping`: test a pooled connection before each use (it may have died with a
        database restart). The test is a round trip and a transaction of its own, half
        of an idle operator's transactions (`achilles bench kept-jobs`); a process whose
        every unit of work is retried can go without it: the first statement on a dead
        connection fails, SQLAlchemy then invalidates the whole pool, and the retry
        connects afresh."""
        parsed = parse_url(with_connect_timeout(url))
        if "application_name" not in parsed.query:
            parsed = parsed.update_query_dict({"application_name": application_name})
        connect_args = {}
        if session_settings:
            if "options" in parsed.query:
                raise InvalidInputError(
                    "the database URL sets `options`; this process sets its own (remove it)"
                )
            connect_args["options"] = " ".join(
                f"-c {name}={value}" for name, value in session_settings.items()
            )
        self.url = parsed
        self.engine: Engine = create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=pre_ping,
            connect_args=connect_args,
        )
        self.sessions: sessionmaker[Session] = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_url_or_env(
        cls, url: str | None, *, pool_size: int = 5, application_name: str = "achilles"
    ) -> Database:
        return cls(
            url or database_url_from_env(), pool_size=pool_size, application_name=application_name
        )

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One session in one transaction, committed when the block succeeds."""
        with self.connection_errors(), self.sessions() as session, session.begin():
            yield session

    @contextmanager
    def reads(self) -> Iterator[Connection]:
        """One pooled connection in autocommit, no ORM session: for reads whose statements
        need no common snapshot (mostly one statement). No BEGIN and COMMIT round trips;
        the API's pages (`achilles bench api`)."""
        with self.connection_errors(), self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def connection_errors(self) -> Iterator[None]:
        """Map connection failures (and a schema never migrated) of work done on
        `self.engine` or `self.sessions` directly (migrations, Knowledge Store reads)."""
        try:
            yield
        except (OperationalError, DisconnectionError) as exc:
            raise unavailable(exc) from exc
        except ProgrammingError as exc:
            behind = schema_behind(exc)
            if behind is None:
                raise
            raise behind from exc

    def dispose(self) -> None:
        self.engine.dispose()
