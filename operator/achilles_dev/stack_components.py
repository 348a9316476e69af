"""The local stack's components as processes: their names and start order, how long each
may take to become ready, and the start of one: spawned detached with a pid file unless it
already runs, then waited on through its health check (its log's last lines shown if it
dies on the way).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.config import StackConfig
from achilles_dev.processes import ProcessRef, is_alive, running_from_pidfile, spawn
from achilles_dev.waiting import wait_until

Report = Callable[[str], None]

# Start order. A stack without a node runs the control plane alone, and no scheduler: its
# pods stay Pending, unbound. `down` stops them in reverse.
CONTROL_PLANE_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
REAL_NODE_COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
)
_START_TIMEOUT_S = {
    "etcd": 60.0,
    "kube-apiserver": 120.0,
    "kube-controller-manager": 60.0,
    "kube-scheduler": 60.0,
    "containerd": 60.0,
    "kubelet": 120.0,
    "kube-proxy": 60.0,
    "model-server": 30.0,
    "oidc-provider": 30.0,  # built before it starts (oidc_build), so only its start counts
    # Installed before they start (mcp_servers); ready once they answer an MCP listing,
    # which starts the stdio server's process (slow on a loaded machine).
    "mcp-time": 120.0,
    "mcp-memory": 120.0,
}
MODEL_SERVER = "model-server"
OIDC_PROVIDER = "oidc-provider"
# The demo's reference MCP servers (achilles_dev.demo_tools): started with the demo, on a
# stack with a real node and PostgreSQL, and stopped by `down` with the rest.
MCP_TIME = "mcp-time"
MCP_MEMORY = "mcp-memory"
DEMO_MCP_SERVERS = (MCP_TIME, MCP_MEMORY)


@dataclass(frozen=True)
class ComponentState:
    name: str
    process: ProcessRef | None

    @property
    def running(self) -> bool:
        return self.process is not None


def start_component(
    config: StackConfig,
    name: str,
    argv: list[str],
    is_ready: Callable[[], bool],
    env: dict[str, str] | None = None,
    *,
    report: Report,
    timeout: float | None = None,
) -> None:
    """Start `name` unless it runs, and wait until `is_ready`. A start that exits, or that
    runs but is not ready in time, raises LocalStackError with its log's last lines."""
    pidfile, log = config.pidfile(name), config.log(name)
    process = running_from_pidfile(pidfile)
    if process is None:
        process = spawn(argv, log=log, pidfile=pidfile, env=env)
    started = time.monotonic()

    def ready() -> bool:
        if not is_alive(process):
            raise LocalStackError(
                f"{name} exited during start-up; last lines of {log}:\n{_tail(log)}"
            )
        return is_ready()

    try:
        wait_until(
            ready,
            timeout=timeout or _START_TIMEOUT_S[name],
            what=f"{name} to become ready",
            interval=0.2,
        )
    except LocalStackError as error:
        if is_alive(process):  # running but never ready: what it said meanwhile
            raise LocalStackError(
                f"{error}; last lines of {log}:\n{_tail(log)}\n(log: {log})"
            ) from error
        raise LocalStackError(f"{error}\n(log: {log})") from error
    report(f"{name}: ready (pid {process.pid}, {time.monotonic() - started:.1f}s, log {log})")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def is_http_ok(url: str) -> bool:
    """Whether `url` answers 200 now: the model server's readiness, at start and in health."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own URL
            return bool(response.status == 200)
    except OSError:
        return False
