"""A PostgreSQL database for one benchmark: created fresh, migrated, dropped afterwards.

By default on a server of its own (`achilles_dev.postgres`, in a new data directory on
a free port, removed at the end). Unlike the test suite's server this one is durable
(fsync and synchronous commit on, the distribution's defaults otherwise), so commit
costs are those of a real installation. `server_url` points at an existing server
instead (a superuser's URL); only the benchmark's own database is created and dropped
there. A server of its own can also listen on a real node's network and let its pods in
(`Reach`), as the dev stack's PostgreSQL does.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from achilles.db import migrate
from achilles.db.database import Database
from achilles_dev import postgres
from achilles_dev.ports import free_port

# What the figures depend on; recorded with every database benchmark.
SETTINGS = (
    "shared_buffers",
    "effective_cache_size",
    "work_mem",
    "maintenance_work_mem",
    "random_page_cost",
    "fsync",
    "synchronous_commit",
    "max_connections",
    "jit",
)


@dataclass(frozen=True)
class Reach:
    """Who besides the host reaches a server of the benchmark's own: the addresses it
    listens on (a real node's host end) and the networks let in with a password (each
    component's own login, `achilles_dev.logins`)."""

    listen: tuple[str, ...] = ()
    pod_networks: tuple[str, ...] = ()


LOOPBACK_ONLY = Reach()


@dataclass(frozen=True)
class BenchDatabase:
    url: str  # postgresql+psycopg://... of the benchmark's own database
    server: dict[str, Any]  # version and settings

    def libpq_dsn(self) -> str:
        return make_url(self.url).set(drivername="postgresql").render_as_string(False)


def _maintenance_dsn(server_url: str) -> str:
    return make_url(server_url).set(drivername="postgresql").render_as_string(False)


def describe_server(database: Database) -> dict[str, Any]:
    with database.engine.connect() as conn:
        version = conn.execute(text("SELECT version()")).scalar_one()
        settings = {name: conn.execute(text(f"SHOW {name}")).scalar_one() for name in SETTINGS}
    return {"version": version, "settings": settings}


@contextmanager
def own_server(report: Callable[[str], None], reach: Reach = LOOPBACK_ONLY) -> Iterator[str]:
    """A durable PostgreSQL server of the benchmark's own; its superuser URL."""
    data_dir = postgres.default_data_root() / f"bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    report(f"starting PostgreSQL in {data_dir}")
    try:
        server = postgres.ensure_running(
            data_dir,
            free_port(),
            durable=True,
            listen=reach.listen,
            pod_networks=reach.pod_networks,
        )
        yield server.url()
    finally:
        postgres.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        report("PostgreSQL stopped and its data directory removed")


@contextmanager
def bench_database(
    report: Callable[[str], None],
    server_url: str | None = None,
    prefix: str = "achilles_bench",
    reach: Reach = LOOPBACK_ONLY,
) -> Iterator[BenchDatabase]:
    """A new database migrated to the newest schema, on `server_url` or a server of its
    own (which `reach` opens to a node's pods)."""
    if server_url is None:
        with own_server(report, reach) as url, bench_database(report, url, prefix) as database:
            yield database
        return
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    maintenance = _maintenance_dsn(server_url)
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url_text = (
        make_url(server_url)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )
    try:
        handle = Database(url_text)
        try:
            migrate.upgrade(handle.engine)
            server = describe_server(handle)
        finally:
            handle.dispose()
        report(f"database {name} migrated ({server['version'].split(',')[0]})")
        yield BenchDatabase(url=url_text, server=server)
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        report(f"database {name} dropped")
