"""A component restarted on its port gets it back, however busy the host's clients are.

The fault suite stops PostgreSQL and the API server and starts them again on the same
address. While one is down, any outgoing connection of the host may be given its port as a
source port if that port lies in the kernel's ephemeral range; the restart then fails with
`address already in use` (issue 41: the API server's restart did). The stacks' ports come
from outside that range (achilles_dev.ports), so here a real PostgreSQL is restarted twenty
times in a row while other threads keep opening connections from the same host address."""

from __future__ import annotations

import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from achilles_dev import postgres
from achilles_dev.ports import ephemeral_range, free_port

pytestmark = [pytest.mark.db, pytest.mark.timeout(600)]

RESTARTS = 20
HELD_CONNECTIONS = 2000  # source ports of the ephemeral range kept taken throughout


class ClientLoad:
    """Connections from 127.0.0.1 to a listener of its own, some held open and the rest
    opened and closed as fast as a thread can, plus a client of PostgreSQL that keeps
    connecting to it (refused while it is down): each takes an ephemeral source port."""

    def __init__(self, postgres_port: int) -> None:
        self.postgres_port = postgres_port
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.stopping = threading.Event()
        self.held: list[socket.socket] = []
        self.accepted: list[socket.socket] = []
        self.connections = 0
        self.threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._churn, daemon=True),
            threading.Thread(target=self._database_client, daemon=True),
        ]

    def __enter__(self) -> ClientLoad:
        for thread in self.threads:
            thread.start()
        address = self.listener.getsockname()
        for _ in range(HELD_CONNECTIONS):
            self.held.append(socket.create_connection(address))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=30)
        for sock in [*self.held, *self.accepted]:
            sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(connection)
            if len(self.accepted) > HELD_CONNECTIONS + 100:
                self.accepted.pop(HELD_CONNECTIONS).close()

    def _churn(self) -> None:
        address = self.listener.getsockname()
        while not self.stopping.is_set():
            try:
                with socket.create_connection(address, timeout=5):
                    self.connections += 1
            except OSError:
                if self.stopping.is_set():
                    return

    def _database_client(self) -> None:
        while not self.stopping.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.postgres_port), timeout=1):
                    self.connections += 1
            except OSError:
                self.connections += 1  # refused while it is down: the port was asked anyway


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = postgres.default_data_root() / f"restart-{uuid.uuid4().hex[:8]}"
    try:
        yield path
    finally:
        postgres.stop(path)
        shutil.rmtree(path, ignore_errors=True)


def _served_port(server: postgres.LocalPostgres) -> int:
    with psycopg.connect(server.libpq_dsn(), connect_timeout=5) as connection:
        row = connection.execute("SHOW port").fetchone()
    assert row is not None
    return int(row[0])


def test_postgres_restarted_twenty_times_under_client_load_always_gets_its_port_back(
    data_dir: Path,
) -> None:
    port = free_port()
    assert port not in ephemeral_range()
    server = postgres.ensure_running(data_dir, port, durable=False)
    with ClientLoad(port) as load:
        for restart in range(1, RESTARTS + 1):
            assert postgres.stop(data_dir), f"restart {restart}: the server was not running"
            # A start that cannot bind its port fails here (LocalStackError, with the log).
            server = postgres.ensure_running(data_dir, port, durable=False)
            assert _served_port(server) == port, f"restart {restart}"
        made = load.connections
    assert made > RESTARTS, f"the load made only {made} connections"
