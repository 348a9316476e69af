"""What the API tests share: a real uvicorn serving an app, rows to read, and a snapshot of
the whole database to prove a refused request wrote nothing."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine, insert, text, update
from sqlalchemy.orm import Session

from achilles.cli.api import KEEP_ALIVE_SECONDS
from achilles.db.journal.models import Agent, AgentRun
from achilles.k8s.annotations import format_run_request
from tests.db.factories import make_agent, make_owner
from tests.waiting import wait_for

_counter = itertools.count(1)


def listening_socket() -> socket.socket:
    """A socket bound to a free loopback port, listening (`served` takes it)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    return listener


@contextmanager
def served(app: FastAPI, listener: socket.socket | None = None) -> Iterator[str]:
    """`app` served by a real uvicorn on a free port (a thread of this process); on
    `listener` when given (an app that must know its own URL before it starts)."""
    listener = listener or listening_socket()
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 15, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        listener.close()


@dataclass
class RecordingRunRequester:
    """The run requests the app made (a stand-in for the cluster's annotation write in the
    API tier; tests/cluster/test_api_cluster.py writes the real annotation)."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    cancels: list[tuple[str, str, int]] = field(default_factory=list)

    def request(self, namespace: str, name: str, at: datetime) -> str:
        value = format_run_request(at)
        self.requests.append((namespace, name, value))
        return value

    def cancel(self, namespace: str, name: str, run_id: int) -> str:
        self.cancels.append((namespace, name, run_id))
        return str(run_id)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_cr_agent(
    engine: Engine, owner: str, *, namespace: str = "team", name: str | None = None, **fields: Any
) -> int:
    """An agent as the operator reconciles it from Agent `namespace/name`."""
    name = name or f"agent-{next(_counter)}"
    make_owner(engine, owner)
    agent_id = make_agent(engine, owner, name=name, **fields)
    with Session(engine) as session, session.begin():
        session.execute(
            update(Agent)
            .where(Agent.id == agent_id)
            .values(cr_namespace=namespace, cr_name=name, cr_uid=f"uid-{agent_id}")
        )
    return agent_id


def add_runs(
    engine: Engine,
    agent_id: int,
    count: int,
    *,
    state: str = "succeeded",
    start: datetime | None = None,
    output: str | None = "done",
) -> list[int]:
    """`count` ended runs of the agent, one minute apart from `start`; their ids."""
    start = start or datetime(2026, 11, 2, 9, tzinfo=UTC)
    reason = {"failed": "error", "skipped": "budget_exceeded"}.get(state)
    rows = []
    for i in range(count):
        at = start + timedelta(minutes=i)
        rows.append(
            {
                "agent_id": agent_id,
                "trigger": "manual",
                "state": state,
                "reason": reason,
                "output": output if state == "succeeded" else None,
                "error": "boom" if state == "failed" else None,
                "tokens_used": 0 if state == "skipped" else 10,
                "created_at": at,
                "started_at": None if state == "skipped" else at,
                "finished_at": at + timedelta(seconds=30),
            }
        )
    with Session(engine) as session, session.begin():
        ids = session.execute(insert(AgentRun).returning(AgentRun.id), rows).scalars().all()
    return sorted(ids)


_DIGEST = (
    "SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '')"
    " FROM {table} t"
)


def database_snapshot(engine: Engine) -> dict[str, str]:
    """Every table's content as one digest per table: equal snapshots, nothing written."""
    with engine.connect() as conn:
        tables = conn.execute(
            text(
                "SELECT quote_ident(tablename) FROM pg_tables"
                " WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
        ).scalars()
        return {
            table: conn.execute(text(_DIGEST.format(table=table))).scalar_one() for table in tables
        }


def get(base_url: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(f"{base_url}{path}", timeout=10, **kwargs)


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """A problem document with that status and one clear detail, no traceback."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json", response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert isinstance(body["detail"], str)
    assert body["detail"].strip()
    assert "\n" not in body["detail"]
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    return body
