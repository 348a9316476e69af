"""The whole local stack on one machine: Postgres, etcd, API server, controllers, scheduler,
and the real node (containerd, kubelet, kube-proxy); or the control plane alone, with no
node (a benchmark of Job creation: its pods are created and never scheduled).

`achilles dev up/down/status/env` and the cluster tests' session fixtures drive a
`LocalStack`, so what developers run is what the tests run. Every component is a
process of its own, started detached with a pid file under the state directory and
waited on through its health endpoint; `down` stops exactly those processes, then
removes what the node left (pod sandboxes, shims, cgroups, mounts, its network
namespace) and checks that nothing is left.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from achilles_dev import controlplane, postgres
from achilles_dev.build import ensure_built
from achilles_dev.config import DATABASE_NAME, StackConfig
from achilles_dev.node import network
from achilles_dev.node.node import RealNode, require_root
from achilles_dev.oidc import is_serving, stack_provider_settings
from achilles_dev.oidc_build import ensure_provider_built
from achilles_dev.pki import NodeIdentity, Pki, ensure_pki
from achilles_dev.processes import running_from_pidfile, stop_group
from achilles_dev.stack_components import (
    CONTROL_PLANE_COMPONENTS,
    MODEL_SERVER,
    OIDC_PROVIDER,
    REAL_NODE_COMPONENTS,
    ComponentState,
    is_http_ok,
    start_component,
)
from achilles_dev.stack_teardown import stop_control_plane, stop_real_node
from achilles_dev.versions import bin_dir
from achilles_dev.waiting import wait_until

Report = Callable[[str], None]

_SETTLE_TIMEOUT_S = 60.0


def _print(line: str) -> None:
    print(line, flush=True)


class LocalStack:
    def __init__(self, config: StackConfig, *, report: Report = _print) -> None:
        self.config = config
        self.report = report

    @property
    def with_postgres(self) -> bool:
        return self.config.with_postgres

    # --- queries ------------------------------------------------------------------------

    @property
    def component_names(self) -> tuple[str, ...]:
        names = REAL_NODE_COMPONENTS if self.config.real_node else CONTROL_PLANE_COMPONENTS
        # The demo's offline model and the people's identity provider come with the
        # database (the cluster tests' stacks bring their own).
        return (*names, MODEL_SERVER, OIDC_PROVIDER) if self.with_postgres else names

    def components(self) -> list[ComponentState]:
        return [
            ComponentState(name, running_from_pidfile(self.config.pidfile(name)))
            for name in self.component_names
        ]

    def node(self) -> RealNode:
        """The real node of this stack (its network must have been chosen by `up`)."""
        return RealNode(
            name=self.config.node_name,
            net=self.config.network,
            layout=self.config.node_layout,
            bin_dir=bin_dir(),
            kubelet_kubeconfig=self.config.component_kubeconfig("kubelet"),
            kube_proxy_kubeconfig=self.config.component_kubeconfig("kube-proxy"),
        )

    def is_up(self) -> bool:
        running = all(c.running for c in self.components())
        return running and (not self.with_postgres or postgres.is_running(self.config.postgres_dir))

    def env_lines(self) -> list[str]:
        lines = [f"export KUBECONFIG={self.config.kubeconfig}"]
        if self.with_postgres:
            # The person's own CLI is the admin (the superuser on loopback, as migrations);
            # the operator's and the API's logins, for running them on the host.
            lines.append(f"export ACHILLES_DATABASE_URL={self.config.database_url}")
            lines += [f"export {name}={url}" for name, url in self._login_urls().items()]
            lines.append(f"export ACHILLES_OIDC_ISSUER={self.config.oidc_issuer}")
            if self.config.real_node:  # the chart's API Deployment runs on a real node only
                lines.append(f"export ACHILLES_API_URL={self.config.api_url}")
        lines.append(f'export PATH="{bin_dir()}:$PATH"')
        if self.config.real_node:
            # crictl and ctr find the node's containerd without flags.
            endpoint = self.config.node_layout.runtime_endpoint()
            lines.append(f"export CONTAINER_RUNTIME_ENDPOINT={endpoint}")
            lines.append(f"export IMAGE_SERVICE_ENDPOINT={endpoint}")
            lines.append(f"export CONTAINERD_ADDRESS={self.config.node_layout.containerd_socket}")
            lines.append("export CONTAINERD_NAMESPACE=k8s.io")
        return lines

    def _login_urls(self) -> dict[str, str]:
        """The components' URLs on loopback, once `up` made their logins (else none)."""
        from achilles.db.roles import Component
        from achilles_dev.logins import (
            DEV_PREFIX,
            PASSWORDS_FILE,
            login_name,
            stored_passwords,
            with_login,
        )

        path = self.config.state_dir / PASSWORDS_FILE
        if not path.exists():
            return {}
        passwords = stored_passwords(path)
        return {
            f"ACHILLES_DEV_{component.upper()}_DATABASE_URL": with_login(
                self.config.database_url,
                user=login_name(DEV_PREFIX, component),
                password=passwords[str(component)],
            )
            for component in (Component.OPERATOR, Component.API)
        }

    # --- up -----------------------------------------------------------------------------

    def up(self) -> bool:
        """Start whatever is not running; False when the whole stack already ran.

        On a running real node it still brings the images up to date (a source edit costs
        a cached `podman build` and one image load), so new pods run the edited code.
        """
        started = time.monotonic()
        if self.is_up() and self.apiserver_ready():
            if self.with_postgres:
                self._ensure_postgres()  # running: only its access rules brought up to date
            if self.config.real_node:
                from achilles_dev.images import ensure_images

                self.node().load_images(ensure_images(report=self.report), self.report)
                self.report(f"already running (state {self.config.state_dir}); images current")
                return False
            self.report(f"already running (state {self.config.state_dir})")
            return False
        real = self.config.real_node
        if real:
            require_root()
        bin_dir = ensure_built(node=real, report=self.report)
        images = None
        if real:
            from achilles_dev.images import ensure_images

            images = ensure_images(report=self.report)
        for directory in (self.config.state_dir, self.config.logs_dir, self.config.run_dir):
            directory.mkdir(parents=True, exist_ok=True)
        if real:
            self._ensure_network()
        self.config.save()
        pki = ensure_pki(
            self.config.pki_dir,
            apiserver_ips=(self.config.apiserver_host,) if real else (),
            node=NodeIdentity(self.config.node_name, self.config.network.node_ip) if real else None,
        )
        controlplane.write_kubeconfigs(self.config, pki)
        if self.with_postgres:
            self._start_postgres()
        self._start(
            "etcd",
            controlplane.etcd_argv(bin_dir, self.config),
            lambda: controlplane.etcd_is_healthy(self.config),
        )
        self.start_apiserver()
        self._grant_kubelet_rbac()
        self._start(
            "kube-controller-manager",
            controlplane.controller_manager_argv(bin_dir, self.config, pki),
            lambda: controlplane.controller_manager_is_healthy(self.config, pki),
        )
        if images is not None:
            self._start(
                "kube-scheduler",
                controlplane.scheduler_argv(bin_dir, self.config, pki),
                lambda: controlplane.scheduler_is_healthy(self.config, pki),
            )
            self._start_real_node(pki, images)
        if self.with_postgres:
            self._start_model_server()
            self.start_oidc_provider()
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

    def _ensure_network(self) -> None:
        """The node's network, before anything listens on it: its index is chosen once
        (again if another stack took it meanwhile)."""
        with network.allocation_lock():
            index = self.config.network_index
            if not index or (
                index in network.used_indices() and not network.is_up(self.config.network)
            ):
                index = network.choose_index()
                self.config = dataclasses.replace(self.config, network_index=index)
            network.ensure_up(self.config.network)

    def _start_real_node(self, pki: Pki, images: Any) -> None:
        node = self.node()
        node.prepare(pki, images.pause)
        self._start("containerd", node.argv("containerd"), node.containerd_is_ready, node.env())
        node.load_images(images, self.report)
        self._start("kubelet", node.argv("kubelet"), self._node_is_ready, node.env())
        self._start("kube-proxy", node.argv("kube-proxy"), node.kube_proxy_is_ready, node.env())
        self.report(
            f"node {node.name}: {node.net.node_ip} in network namespace {node.net.netns}, "
            f"pods on {node.net.pod_cidr}"
        )

    def _start_model_server(self) -> None:
        """`achilles model-server` on the address pods reach the host at (the demo model)."""
        url = self.config.model_server_url
        argv = [sys.executable, "-m", "achilles", "model-server"]
        argv += [
            "--host",
            self.config.apiserver_host,
            "--port",
            str(self.config.ports.model_server),
        ]
        self._start(MODEL_SERVER, argv, lambda: is_http_ok(f"{url}/models"))

    def start_oidc_provider(self) -> None:
        """The dev OpenID Provider (built once first), unless it already runs."""
        binary = ensure_provider_built(report=self.report)
        settings = stack_provider_settings(self.config)
        for directory in (self.config.logs_dir, self.config.run_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._start(
            OIDC_PROVIDER,
            settings.argv(binary),
            lambda: is_serving(settings.issuer),
            {**os.environ, **settings.env()},
        )
        self.report(
            f"{OIDC_PROVIDER}: issuer {settings.issuer}, dev password {settings.dev_password}"
        )

    def _ensure_postgres(self) -> postgres.LocalPostgres:
        """The server running, listening where pods reach it, with their access rules."""
        net = self.config.network if self.config.real_node else None
        return postgres.ensure_running(
            self.config.postgres_dir,
            self.config.ports.postgres,
            durable=self.config.durable,
            listen=(net.host_ip,) if net else (),
            pod_networks=(net.pod_cidr, net.link_cidr) if net else (),
        )

    def _start_postgres(self) -> None:
        net = self.config.network if self.config.real_node else None
        server = self._ensure_postgres()
        _ensure_database(server.libpq_dsn(), DATABASE_NAME)
        # The server (its own user, when we are root) writes its log in its data directory;
        # logs/postgres.log points there, beside every other component's log.
        link = self.config.log("postgres")
        if not (link.is_symlink() and link.readlink() == server.log_file):
            link.unlink(missing_ok=True)
            link.symlink_to(server.log_file)
        where = f"127.0.0.1 and {net.host_ip}" if net else "127.0.0.1"
        self.report(
            f"postgres: ready on {where}:{server.port}, database {DATABASE_NAME}, log {link}"
        )

    def start_apiserver(self) -> None:
        """Start kube-apiserver and wait until it is ready: at `up`, and again after the
        fault suite killed it (the same argv, the same exit and readiness checks)."""
        pki = Pki(self.config.pki_dir)
        self._start(
            "kube-apiserver",
            controlplane.apiserver_argv(bin_dir(), self.config, pki),
            lambda: controlplane.apiserver_is_ready(self.config, pki),
        )

    def _start(
        self,
        name: str,
        argv: list[str],
        is_ready: Callable[[], bool],
        env: dict[str, str] | None = None,
    ) -> None:
        start_component(self.config, name, argv, is_ready, env, report=self.report)

    def _admin_client(self) -> Any:
        from achilles.k8s.client import api_client

        return api_client(self.config.kubeconfig)

    def apiserver_ready(self) -> bool:
        return controlplane.apiserver_is_ready(self.config, Pki(self.config.pki_dir))

    def _grant_kubelet_rbac(self) -> None:
        """The API server's access to the real kubelet (logs, exec); none without a node."""
        from achilles_dev.rbac import ensure_apiserver_kubelet_rbac

        if not self.config.real_node:
            return
        with self._admin_client() as api_client:
            ensure_apiserver_kubelet_rbac(api_client)

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
        if self.config.real_node:
            stop_real_node(self)
            return
        stop_control_plane(self)


def _ensure_database(dsn: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if exists is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
