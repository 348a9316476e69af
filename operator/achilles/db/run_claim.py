"""A run's claim with psycopg alone: a run pod's first write, before SQLAlchemy loads.

The claim is the run's first heartbeat (it writes `started_at` and `heartbeat_at`), and a
pod's start to it is mostly the interpreter's imports: SQLAlchemy with its dialects was
about half of what the runner imported before its claim (docs/performance.md). The claim
is one call of a SQL function, `achilles_claim_run` (0011_least_privilege), so it needs no
ORM: it is made here on a libpq connection of its own, and the journal's stack is
imported after it. The function's guards hold whoever calls it: it locks the row (a
runner that starts before the dispatching transaction commits waits for it), needs the
run's secret in the session's settings, and claims only a queued run.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from achilles.db import driver_errors
from achilles.db.url_text import SCHEMES, URL_EXAMPLE, redacted
from achilles.errors import InvalidInputError


def libpq_url(url: str) -> str:
    """The URL as libpq takes it: `postgresql://`, whatever driver it names for
    SQLAlchemy (`postgresql+psycopg://`), its options checked by libpq itself."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in SCHEMES:
        raise InvalidInputError(f"not a PostgreSQL URL (got {redacted(url)!r}; e.g. {URL_EXAMPLE})")
    plain = f"postgresql://{rest}"
    try:
        options = conninfo_to_dict(plain)
    except psycopg.ProgrammingError as exc:
        raise InvalidInputError(f"{exc} (got {redacted(url)!r})") from exc
    # libpq reads a port only when it connects, and then says "could not resolve".
    ports = str(options.get("port") or "5432").split(",")
    if not all(port.isdigit() and 0 < int(port) < 65536 for port in ports):
        raise InvalidInputError(
            f"not a port number: {options['port']!r} (got {redacted(url)!r}; e.g. {URL_EXAMPLE})"
        )
    return plain


def runner_conninfo(
    url: str,
    *,
    session_settings: Mapping[str, str] | None,
    application_name: str,
    connect_timeout: int,
) -> str:
    """The runner's libpq connection string: `session_settings` ride on the connection
    as libpq's `options`, as `Database` sets them, so they are set before any
    statement."""
    conninfo = libpq_url(url)
    given = conninfo_to_dict(conninfo)
    extra: dict[str, str] = {}
    if session_settings:
        if "options" in given:
            raise InvalidInputError(
                "the database URL sets `options`; this process sets its own (remove it)"
            )
        settings = session_settings.items()
        extra["options"] = " ".join(f"-c {name}={value}" for name, value in settings)
    if "application_name" not in given:
        extra["application_name"] = application_name
    if "connect_timeout" not in given:
        extra["connect_timeout"] = str(connect_timeout)
    return make_conninfo(conninfo, **extra)


def claim_run_alone(conninfo: str, run_id: int) -> bool:
    """`queued -> running` in a transaction of its own; False if the run is not queued
    (claimed, finished, deleted)."""
    try:
        with psycopg.connect(conninfo) as conn:  # commits on a clean exit
            row = conn.execute("SELECT achilles_claim_run(%s)", (run_id,)).fetchone()
    except psycopg.OperationalError as exc:
        raise driver_errors.unreachable(exc) from exc
    except psycopg.ProgrammingError as exc:
        behind = driver_errors.schema_behind(exc)
        if behind is None:
            raise
        raise behind from exc
    return bool(row and row[0])


class HeartbeatAlone:
    """The run's heartbeat with psycopg alone, on a connection of its own (opened at the
    first beat, and again after one failed): it beats from just after the claim, while
    the journal's stack is still being imported, which on a starved node took longer
    than the stale threshold (`achilles chaos double-leader`)."""

    def __init__(self, conninfo: str, run_id: int) -> None:
        self._conninfo = conninfo
        self._run_id = run_id
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def beat(self) -> bool:
        """`heartbeat_at` moved to the database's now; False when the row is no longer
        `running` (the reaper failed it, or it finished)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._conninfo, autocommit=True)
            row = self._conn.execute(
                "UPDATE agent_runs SET heartbeat_at = now()"
                " WHERE id = %s AND state = 'running' RETURNING id",
                (self._run_id,),
            ).fetchone()
        except psycopg.OperationalError as exc:
            self.close()
            raise driver_errors.unreachable(exc) from exc
        return row is not None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
