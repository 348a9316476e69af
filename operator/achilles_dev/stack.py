"""The whole local stack on one machine: Postgres, etcd, API server, controllers, kubelet stand-in.

`achilles dev up/down/status/env` and the cluster tests' session fixture both drive a
`LocalStack`, so what developers run is what the tests run. Every component is a
process of its own, started detached with a pid file under the state directory and
waited on through its health endpoint; `down` stops exactly those processes (and the
pods' processes the stand-in left), then checks that nothing is left.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from achilles.errors import LocalStackError
from achilles_dev import controlplane, postgres
from achilles_dev.build import ensure_built
from achilles_dev.config import DATABASE_NAME, StackConfig
from achilles_dev.kubelet.runs import recorded_shims
from achilles_dev.pki import Pki, ensure_pki
from achilles_dev.processes import (
    ProcessRef,
    is_alive,
    running_from_pidfile,
    spawn,
    stop_group,
)
from achilles_dev.versions import bin_dir
from achilles_dev.waiting import wait_until

Report = Callable[[str], None]

# Start order; `down` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kubelet")
_START_TIMEOUT_S = {
    "etcd": 60.0,
    "kube-apiserver": 120.0,
    "kube-controller-manager": 60.0,
    "kubelet": 60.0,
}
_SETTLE_TIMEOUT_S = 60.0


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class ComponentState:
    name: str
    process: ProcessRef | None

    @property
    def running(self) -> bool:
        return self.process is not None


class LocalStack:
    def __init__(self, config: StackConfig, *, report: Report = _print) -> None:
        self.config = config
        self.report = report

    @property
    def with_postgres(self) -> bool:
        return self.config.with_postgres

    # --- queries ------------------------------------------------------------------------

    def components(self) -> list[ComponentState]:
        return [
            ComponentState(name, running_from_pidfile(self.config.pidfile(name)))
            for name in COMPONENTS
        ]

    def is_up(self) -> bool:
        return all(c.running for c in self.components())

    def env_lines(self) -> list[str]:
        lines = [f"export KUBECONFIG={self.config.kubeconfig}"]
        if self.with_postgres:
            lines.append(f"export ACHILLES_DATABASE_URL={self.config.database_url}")
        lines.append(f'export PATH="{bin_dir()}:$PATH"')
        return lines

    # --- up -----------------------------------------------------------------------------

    def up(self) -> bool:
        """Start whatever is not running; False when the whole stack already ran."""
        started = time.monotonic()
        if self.is_up() and self._apiserver_ready():
            self.report(f"already running (state {self.config.state_dir}); nothing to do")
            return False
        bin_dir = ensure_built(report=self.report)
        for directory in (self.config.state_dir, self.config.logs_dir, self.config.run_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.config.save()
        pki = ensure_pki(self.config.pki_dir)
        controlplane.write_kubeconfigs(self.config, pki)
        if self.with_postgres:
            self._start_postgres()
        self._start(
            "etcd",
            controlplane.etcd_argv(bin_dir, self.config),
            lambda: controlplane.etcd_is_healthy(self.config),
        )
        self._start(
            "kube-apiserver",
            controlplane.apiserver_argv(bin_dir, self.config, pki),
            lambda: controlplane.apiserver_is_ready(self.config, pki),
        )
        self._grant_kubelet_rbac()
        self._start(
            "kube-controller-manager",
            controlplane.controller_manager_argv(bin_dir, self.config, pki),
            lambda: controlplane.controller_manager_is_healthy(self.config, pki),
        )
        self._start("kubelet", self._kubelet_argv(pki), self._node_is_ready)
        wait_until(
            self._default_service_account_exists,
            timeout=_SETTLE_TIMEOUT_S,
            what="the default ServiceAccount in namespace default",
        )
        self.report(
            f"local stack ready in {time.monotonic() - started:.1f}s: Kubernetes "
            f"{controlplane.apiserver_version(self.config, pki)} at {self.config.apiserver_url}, "
            f"kubeconfig {self.config.kubeconfig}"
        )
        return True

    def _start_postgres(self) -> None:
        server = postgres.ensure_running(
            self.config.postgres_dir, self.config.ports.postgres, durable=self.config.durable
        )
        _ensure_database(server.libpq_dsn(), DATABASE_NAME)
        self.report(f"postgres: ready on 127.0.0.1:{server.port}, database {DATABASE_NAME}")

    def _start(self, name: str, argv: list[str], is_ready: Callable[[], bool]) -> None:
        pidfile, log = self.config.pidfile(name), self.config.log(name)
        process = running_from_pidfile(pidfile)
        if process is None:
            process = spawn(argv, log=log, pidfile=pidfile)
        started = time.monotonic()

        def ready() -> bool:
            if not is_alive(process):
                raise LocalStackError(
                    f"{name} exited during start-up; last lines of {log}:\n{_tail(log)}"
                )
            return is_ready()

        try:
            wait_until(
                ready, timeout=_START_TIMEOUT_S[name], what=f"{name} to become ready", interval=0.2
            )
        except LocalStackError as error:
            raise LocalStackError(f"{error}\n(log: {log})") from error
        self.report(
            f"{name}: ready (pid {process.pid}, {time.monotonic() - started:.1f}s, log {log})"
        )

    def _kubelet_argv(self, pki: Pki) -> list[str]:
        return [
            sys.executable, "-m", "achilles_dev.kubelet",
            "--kubeconfig", str(self.config.component_kubeconfig("kubelet")),
            "--state-dir", str(self.config.kubelet_dir),
            "--node-name", self.config.node_name,
            "--namespaces", ",".join(self.config.kubelet_namespaces),
            "--port", str(self.config.ports.kubelet),
            "--tls-cert-file", str(pki.kubelet_serving.cert),
            "--tls-private-key-file", str(pki.kubelet_serving.key),
            "--client-ca-file", str(pki.ca.cert),
        ]  # fmt: skip

    def _admin_client(self) -> Any:
        from achilles.k8s.client import api_client

        return api_client(self.config.kubeconfig)

    def _apiserver_ready(self) -> bool:
        return controlplane.apiserver_is_ready(self.config, Pki(self.config.pki_dir))

    def _grant_kubelet_rbac(self) -> None:
        from achilles_dev.rbac import ensure_kubelet_rbac

        with self._admin_client() as api_client:
            ensure_kubelet_rbac(api_client)

    def _node_is_ready(self) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self._admin_client() as api_client:
            try:
                node = client.CoreV1Api(api_client).read_node(self.config.node_name)
            except ApiException:
                return False
        conditions = node.status.conditions if node.status else None
        return any(c.type == "Ready" and c.status == "True" for c in conditions or [])

    def _default_service_account_exists(self) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self._admin_client() as api_client:
            try:
                client.CoreV1Api(api_client).read_namespaced_service_account("default", "default")
            except ApiException:
                return False
        return True

    def stop_component(self, name: str) -> None:
        """Stop one component (its pods keep running); `up` starts it again."""
        process = running_from_pidfile(self.config.pidfile(name))
        if process is not None:
            stop_group(process, what=name)
        self.config.pidfile(name).unlink(missing_ok=True)

    # --- down ---------------------------------------------------------------------------

    def down(self) -> None:
        stopped = []
        for component in reversed(self.components()):
            if component.process is not None:
                stop_group(component.process, what=component.name)
                stopped.append(component.name)
            self.config.pidfile(component.name).unlink(missing_ok=True)
        pods = [shim for shim in _pod_shims(self.config.kubelet_dir / "pods") if is_alive(shim)]
        for shim in pods:
            stop_group(shim, grace=5.0, what=f"pod process {shim.pid}")
        if pods:
            stopped.append(f"{len(pods)} pod process(es)")
        if self.with_postgres and postgres.stop(self.config.postgres_dir):
            stopped.append("postgres")
        leftovers = [c.name for c in self.components() if c.running]
        leftovers += [
            f"pod process {s.pid}"
            for s in _pod_shims(self.config.kubelet_dir / "pods")
            if is_alive(s)
        ]
        if self.with_postgres and postgres.is_running(self.config.postgres_dir):
            leftovers.append("postgres")
        if leftovers:
            raise LocalStackError(f"still running after down: {', '.join(leftovers)}")
        self.report(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


def _pod_shims(pods_dir: Path) -> list[ProcessRef]:
    return recorded_shims(pods_dir) if pods_dir.is_dir() else []


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _ensure_database(dsn: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if exists is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
