"""Engines and sessions. The caller owns the transaction (`with session.begin():`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from achilles.errors import ConfigurationError, DatabaseUnavailable

DATABASE_URL_ENV = "ACHILLES_DATABASE_URL"


def normalise_url(url: str) -> str:
    """Accept plain `postgresql://` URLs and pin the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(f"database URL must be PostgreSQL, got {parsed.drivername!r}")
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def database_url_from_env() -> str:
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        raise ConfigurationError(
            f"{DATABASE_URL_ENV} is not set (e.g. postgresql://user@host:5432/achilles)"
        )
    return url


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    return create_engine(
        normalise_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def engine_scope(url: str | None, *, pool_size: int = 1) -> Iterator[Engine]:
    """An engine for one command; connection failures become `DatabaseUnavailable`."""
    engine = make_engine(url or database_url_from_env(), pool_size=pool_size)
    try:
        yield engine
    except OperationalError as exc:
        detail = " ".join(str(exc.orig).split())  # one line, whatever libpq said
        raise DatabaseUnavailable(f"database unreachable: {detail}") from exc
    finally:
        engine.dispose()


@contextmanager
def transaction(url: str | None) -> Iterator[Session]:
    """One session in one transaction, committed when the block succeeds."""
    with engine_scope(url) as engine, make_session_factory(engine)() as session, session.begin():
        yield session
