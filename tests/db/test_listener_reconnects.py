"""The listener's LISTEN connection lost is a failed pass of its loop, connected again by
the runtime after the loop's backoff (runtime/manager.py, `LoopHandle.drive`), not by a
sleep of its own: on the real database, its backend terminated as a server restart or a
network cut would end it; the listener connects again and says so (`RECONNECTED`, which
wakes the loops whose NOTIFYs may have been lost), and the failure is counted and logged
as one warning line, without a traceback: the database restarting is expected.

The only waits are for the listener's wakes, on their own events."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import cast

import pytest
from kubernetes import client
from prometheus_client import REGISTRY
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers import listener
from achilles.handlers.manager import Runtime, listener_loop
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.objects import Resources
from achilles.runtime.wake import Wake
from tests.db.logins import login_url

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)
HEARD_WITHIN = 30.0  # seconds; a connection takes milliseconds, the backoff 1 s


def _heard(wake: Wake) -> None:
    assert wake.event.wait(HEARD_WITHIN), "the listener did not connect"
    assert wake.take()


def _terminate_listener(db: Engine) -> int:
    """End the listener's backend (its last statement is a LISTEN); how many ended."""
    with db.begin() as conn:
        ended = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                " AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
    return int(ended)


def _failed_passes() -> float:
    """The listener's failed passes as the operator's Prometheus figures count them."""
    labels = {"loop": listener.NAME}
    return REGISTRY.get_sample_value("achilles_loop_errors_total", labels) or 0.0


def test_a_lost_listen_connection_is_connected_again_by_the_runtime(
    db: Engine, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "achilles.operator")
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    context = RuntimeContext(
        config=OperatorConfig(database_url, TEMPLATE, 0, timedelta(minutes=5)),
        database=database,
        resources=cast(Resources, None),
        jobs=RunJobs(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), "x"),
    )
    runtime = Runtime(context)  # the table's routes and the loops' handles, not started
    handle = runtime.manager.handles[listener.NAME]
    assert handle.retry == listener.RETRY
    reconnected = context.wakes.target("scheduler")  # one of the loops RECONNECTED wakes
    before = _failed_passes()
    thread = threading.Thread(target=listener_loop, args=(context, handle), daemon=True)
    thread.start()
    try:
        _heard(reconnected)  # LISTENing
        assert _terminate_listener(db) == 1
        _heard(reconnected)  # the pass failed, and the runtime connected it again
        assert _failed_passes() == before + 1
        assert thread.is_alive()
        (logged,) = [r for r in caplog.records if r.getMessage().startswith("listener pass")]
        assert logged.levelno == logging.WARNING
        assert logged.exc_info is None  # no traceback for an outage the loop outlives
        said = logged.getMessage()
        assert "database unreachable: " in said
        assert "tried again after its backoff" in said
        assert "\n" not in said
    finally:
        context.stop.set()
        thread.join(timeout=10)
        database.dispose()
    assert not thread.is_alive()
