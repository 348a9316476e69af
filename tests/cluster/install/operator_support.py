"""The operator under test: `achilles operator` as a real process on the session cluster
and database (the chart's release), plus the offline model server its runs talk to."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client
from sqlalchemy import Engine, text

from achilles.db.roles import Component
from achilles.k8s.run_metadata import RUN_SELECTOR
from achilles_dev.chart_secrets import RUNNER_DATABASE_SECRET
from achilles_dev.images import RUNNER_IMAGE
from tests.cluster.conftest import Cluster
from tests.cluster.install.conftest import Release
from tests.waiting import wait_for

RUNS_NAMESPACE = "achilles-runs"
SLOW_RUNNER = Path(__file__).with_name("slow_runner.py")


def slow_runner_command() -> str:
    """`ACHILLES_RUNNER_COMMAND` for the slow runner (`slow_runner.py`): its source as
    `python -c` in the runner image, which has the engine but not the tests."""
    return f"python -c {shlex.quote(SLOW_RUNNER.read_text())}"


def runner_pid(run_id: int, release: Release) -> int | None:
    """The slow runner's process for `run_id`, found from the host: a container's process,
    which the host's /proc lists too. Run ids start at 1 in every test session's
    database, so a runner of another session on this host (its own cluster and
    PostgreSQL) is told apart by the database port it was given."""
    needle = f"--run-id\x00{run_id}\x00"
    source = SLOW_RUNNER.read_text()  # it runs as `python -c <source>`
    port = urlsplit(release.database_url).port
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_text()
            environ = (entry / "environ").read_bytes().split(b"\x00")
        except OSError:
            continue
        slow = source in cmdline
        if slow and cmdline.endswith(needle) and _database_port(environ) == port:
            return int(entry.name)
    return None


def _database_port(environ: list[bytes]) -> int | None:
    prefix = b"ACHILLES_DATABASE_URL="
    for variable in environ:
        if variable.startswith(prefix):
            return urlsplit(variable[len(prefix) :].decode()).port
    return None


class ClaimGate:
    """Where the slow runner waits before its claim (ACHILLES_TEST_CLAIM_GATE): a TCP
    listener on the address the cluster's pods reach this machine at. While closed, a
    runner's connection is held unanswered; opening answers every held one and each later
    one at once."""

    def __init__(self, host: str) -> None:
        self._listener = socket.create_server((host, 0))
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._open = True
        self._held: list[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                door, _ = self._listener.accept()
            except OSError:
                return  # the listener closed: `stop`
            with self._lock:
                if self._open:
                    _answer(door)
                else:
                    self._held.append(door)

    def close(self) -> None:
        with self._lock:
            self._open = False

    def waiting(self) -> int:
        """How many runners wait at the closed gate (pods started, before their claim)."""
        with self._lock:
            return len(self._held)

    def open(self) -> None:
        with self._lock:
            self._open = True
            held, self._held = self._held, []
        for door in held:
            _answer(door)

    def stop(self) -> None:
        self.open()
        self._listener.close()
        self._accepting.join(timeout=10)


def _answer(door: socket.socket) -> None:
    with door, contextlib.suppress(OSError):  # the pod went meanwhile: nobody waits
        door.sendall(b"!")


@contextmanager
def claim_gate(cluster: Cluster) -> Iterator[ClaimGate]:
    gate = ClaimGate(cluster.host_address)
    try:
        yield gate
    finally:
        gate.stop()


def ensure_runner_secret(cluster: Cluster, database_url: str) -> None:
    core = cluster.core
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=RUNNER_DATABASE_SECRET), string_data={"url": database_url}
    )
    try:
        core.create_namespaced_secret(RUNS_NAMESPACE, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(RUNNER_DATABASE_SECRET, RUNS_NAMESPACE, body)


@dataclass
class OperatorProcess:
    cluster: Cluster
    release: Release
    log_path: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "ACHILLES_DATABASE_URL": self.release.login_url(Component.OPERATOR),
            "ACHILLES_RUNS_NAMESPACE": RUNS_NAMESPACE,
            "ACHILLES_RUNNER_IMAGE": RUNNER_IMAGE,  # loaded on the node (ours, kind's)
            "ACHILLES_METRICS_PORT": "0",
            "ACHILLES_RUNNER_ENV": json.dumps({"ACHILLES_HEARTBEAT_INTERVAL": "2"}),
            **self.env_overrides,
        }

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "achilles", "operator", "--liveness", ""],
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


@contextmanager
def running_operator(
    cluster: Cluster, release: Release, log_path: Path, **env: str
) -> Iterator[OperatorProcess]:
    ensure_runner_secret(cluster, release.pod_login_url(Component.RUNNER))
    operator = OperatorProcess(cluster, release, log_path, env_overrides=env)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


@dataclass
class ModelServerProcess:
    process: subprocess.Popen[str]
    base_url: str

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@contextmanager
def model_server(cluster: Cluster, script: Path | None = None) -> Iterator[ModelServerProcess]:
    """The offline model server, on the address the cluster's pods (the runs) reach;
    `script`: its replies (`achilles model-server --script`), else the default ones."""
    scripted = ["--script", str(script)] if script is not None else []
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "achilles",
            "model-server",
            "--host",
            cluster.host_address,
            "--port",
            "0",
            *scripted,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    url = line.split("listening on ")[1].split()[0]
    server = ModelServerProcess(process, url)
    try:
        yield server
    finally:
        server.stop()


def run_jobs(cluster: Cluster) -> list[Any]:
    return list(
        cluster.batch.list_namespaced_job(RUNS_NAMESPACE, label_selector=RUN_SELECTOR).items
    )


def agent_status(api: Any, name: str, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = api.get("Agent", name, namespace).get("status") or {}
    return status


def agent_spec(api: Any, name: str, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = api.get("Agent", name, namespace)["spec"]
    return spec


def journal_rows(journal: Engine, sql: str, **params: Any) -> list[Any]:
    with journal.begin() as conn:
        return list(conn.execute(text(sql), params))


def new_owner(journal: Engine) -> str:
    """An active owner of a fresh key, straight into the journal."""
    key = f"owner-{uuid.uuid4().hex[:6]}"
    with journal.begin() as conn:
        conn.execute(text("INSERT INTO users (key, timezone) VALUES (:k, 'UTC')"), {"k": key})
    return key


def wait_status(
    api: Any, name: str, namespace: str, predicate: Any, what: str, timeout: float = 90
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = agent_status(api, name, namespace)
        return status if predicate(status) else None

    result: dict[str, Any] = wait_for(check, timeout, what=what)
    return result
