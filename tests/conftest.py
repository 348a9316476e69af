"""Fixtures shared by every tier: a real PostgreSQL server and a fresh database per session.

Each pytest session starts a server of its own (`achilles_dev.postgres`) in a fresh data
directory on a port the kernel reports free, and removes it at the end: two test runs on
one machine (two checkouts, a developer beside CI) never share or stop each other's
server, and the suite never touches a developer's data. The session migrates a new
database; tests that write get a truncated schema afterwards.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg.errors import DeadlockDetected
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from achilles.db import migrate
from achilles.db.database import Database
from achilles_dev import postgres
from tests import workers

# The real OpenID Provider (`oidc_provider` session fixture) and the real trace collector
# (`jaeger`), for every tier.
pytest_plugins = ["tests.oidc_provider", "tests.jaeger_collector", "tests.mcp_fixtures"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    workers.check_groups(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadgroup` (`make test`): the two groups of tests/workers.py."""
    if config.getoption("dist") != "loadgroup":
        return None
    return workers.TwoGroups(config, log)


@contextmanager
def session_postgres(
    listen: tuple[str, ...] = (), pod_networks: tuple[str, ...] = ()
) -> Iterator[postgres.LocalPostgres]:
    """A throwaway server for a session, removed afterwards (`postgres.ensure_running` for
    `listen` and `pod_networks`: the cluster tier's on kind, tests/cluster/conftest.py)."""
    data_dir = postgres.default_data_root() / f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    server = postgres.start_throwaway(data_dir, listen=listen, pod_networks=pod_networks)
    try:
        yield server
    finally:
        postgres.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.LocalPostgres]:
    with session_postgres() as server:
        yield server


def create_database(server: postgres.LocalPostgres, prefix: str = "achilles_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.libpq_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(server: postgres.LocalPostgres, name: str) -> None:
    with psycopg.connect(server.libpq_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url(postgres_server: postgres.LocalPostgres) -> Iterator[str]:
    """URL of a database migrated to the newest schema, private to this pytest session."""
    name = create_database(postgres_server)
    url = postgres_server.url(name)
    engine = Database(url).engine
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    drop_database(postgres_server, name)


@pytest.fixture(scope="session")
def db_engine(database_url: str) -> Iterator[Engine]:
    engine = Database(database_url, pool_size=70).engine
    yield engine
    engine.dispose()


def truncate_all(engine: Engine, attempts: int = 5) -> None:
    """Empty every table but the migration marker; restore the settings singleton.

    TRUNCATE locks its tables one after the other, so a reader of two of them in the
    other order (the API tier's event hub joins `owner_events` to `users` on every
    NOTIFY) can deadlock with it. PostgreSQL then aborts one of the two whole, and the
    documented remedy is to run the aborted transaction again.
    """
    for attempt in range(1, attempts + 1):
        try:
            _truncate_once(engine)
            return
        except OperationalError as exc:
            if not isinstance(exc.orig, DeadlockDetected) or attempt == attempts:
                raise


def _truncate_once(engine: Engine) -> None:
    with engine.begin() as conn:
        tables = conn.execute(
            text(
                "SELECT quote_ident(tablename) FROM pg_tables "
                "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
        ).scalars()
        conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        conn.execute(text("INSERT INTO platform_settings (id) VALUES (1)"))


@pytest.fixture
def db(db_engine: Engine) -> Iterator[Engine]:
    """The session database, emptied after the test."""
    yield db_engine
    truncate_all(db_engine)
