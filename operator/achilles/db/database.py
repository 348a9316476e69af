"""The one database handle of a process: one Engine, one pool, one error mapping.

Every entry point (the CLI, the runner, the operator) opens a `Database` once and
passes it down; services open transactions on it with `with database.transaction()
as session:`, and the db layer's query functions take that session (the caller owns
the transaction). A connection failure becomes `DatabaseUnavailable` with libpq's
message on one line, and a malformed URL `ConfigurationError`, wherever they happen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from achilles.errors import ConfigurationError, DatabaseUnavailable

DATABASE_URL_ENV = "ACHILLES_DATABASE_URL"
URL_EXAMPLE = "postgresql://user:password@host:5432/achilles"

# Nothing may hang on an unreachable database; libpq's default is to wait for the OS.
CONNECT_TIMEOUT_SECONDS = 10


def parse_url(url: str) -> URL:
    """A PostgreSQL URL pinned to the psycopg 3 driver; `postgres://` is accepted too
    (hosted offers hand those out). Anything else is a `ConfigurationError`."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(
            f"database URL {url!r} is not a URL (expected e.g. {URL_EXAMPLE})"
        ) from exc
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"database URL must be PostgreSQL, got {parsed.drivername!r}")
    if parsed.drivername not in ("postgres", "postgresql", "postgresql+psycopg"):
        raise ConfigurationError(
            f"database URL driver {parsed.drivername!r} is not supported; use postgresql://"
        )
    return parsed.set(drivername="postgresql+psycopg")


def normalise_url(url: str) -> str:
    return parse_url(url).render_as_string(hide_password=False)


def with_connect_timeout(url: str, seconds: int = CONNECT_TIMEOUT_SECONDS) -> str:
    """The URL with libpq's `connect_timeout`, unless it already sets one."""
    parse_url(url)  # validated; the URL keeps its own spelling
    parsed = make_url(url)
    if "connect_timeout" in parsed.query:
        return url
    return parsed.update_query_dict({"connect_timeout": str(seconds)}).render_as_string(
        hide_password=False
    )


def database_url_from_env() -> str:
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        raise ConfigurationError(
            f"no database URL: pass --database-url or set {DATABASE_URL_ENV} (e.g. {URL_EXAMPLE})"
        )
    return url


def unavailable(exc: OperationalError) -> DatabaseUnavailable:
    detail = " ".join(str(exc.orig).split())  # one line, whatever libpq said
    return DatabaseUnavailable(f"database unreachable: {detail}")


class Database:
    """One Engine and its pool for the life of the process."""

    def __init__(self, url: str, *, pool_size: int = 5, application_name: str = "achilles"):
        parsed = parse_url(with_connect_timeout(url))
        if "application_name" not in parsed.query:
            parsed = parsed.update_query_dict({"application_name": application_name})
        self.url = parsed
        self.engine: Engine = create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=pool_size,
            # A pooled connection may have died with a database restart; test it first.
            pool_pre_ping=True,
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
        try:
            with self.sessions() as session, session.begin():
                yield session
        except OperationalError as exc:
            raise unavailable(exc) from exc

    @contextmanager
    def connection_errors(self) -> Iterator[None]:
        """Map connection failures of work done on `self.engine` directly (migrations)."""
        try:
            yield
        except OperationalError as exc:
            raise unavailable(exc) from exc

    def dispose(self) -> None:
        self.engine.dispose()
