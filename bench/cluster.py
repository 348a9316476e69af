"""What the cluster benchmarks share: a control plane of their own with the chart.

`bench_cluster`: a throwaway local stack on free ports, durable like a real one, with
the chart installed (operator Deployment off, as `achilles dev up` does) and a durable
PostgreSQL database of its own (`bench.pg`); everything is stopped and removed after.
Its node is one of two:
- "none" (the default): etcd, kube-apiserver, kube-controller-manager built from source
  and no node (no scheduler either): the Job controller creates each Job's pod and it
  stays Pending, unbound, which is what a benchmark of Job creation or of the operator's
  intake wants (a thousand containers would swamp a small machine and measure it, not the
  operator); no root needed;
- "containerd": the real node of `achilles dev up` (kube-scheduler, containerd + runc,
  kubelet, kube-proxy in a network namespace of its own; root) running the locally built
  runner image, for the benchmarks whose runs must run. Its database server also listens
  on the host's end of the node's network and lets the pods in, as the dev stack's does;
  the runners' Secret and `BenchCluster.host_for_pods` name that address.

The operator under test is `bench.operator_process`; what the API server counts of it,
`bench.apiserver_counts`; objects in bulk and the journal, `bench.workload`.

While the benchmark runs, the seed's invariant monitor (`achilles_dev.invariants`, issue
36 item 10) watches the journal and the run pods; its verdict and sample count are a row
of the benchmark's report, and a violation fails the benchmark (`bench.cli`). Its own
transactions are in `BenchCluster.monitor.transactions`, for the benchmarks that count
the database's.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.db.roles import Component
from achilles.k8s.client import api_client
from achilles_dev.build import ensure_built
from achilles_dev.chart import ChartInstall, apply_crds, install_chart
from achilles_dev.chart_secrets import RUNNER_DATABASE_SECRET
from achilles_dev.chart_values import local_values
from achilles_dev.config import NodeKind, Ports, StackConfig
from achilles_dev.invariants import InvariantMonitor, pod_lister
from achilles_dev.logins import ComponentLogins, grant_component_logins
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir
from bench.pg import LOOPBACK_ONLY, BenchDatabase, Reach, bench_database
from bench.report import Report, record_invariants

RUNS_NAMESPACE = "achilles-runs"
GROUP, VERSION = "achilles.io", "v1alpha1"

Progress = Callable[[str], None]


@dataclass
class BenchCluster:
    stack: LocalStack
    api: client.ApiClient
    database: BenchDatabase
    work_dir: Path
    # The operator and the run pods connect as their own logins, as installed.
    logins: ComponentLogins
    # The seed's invariants, watched from the chart's install to the end (none: not yet).
    monitor: InvariantMonitor | None = field(default=None)

    def monitor_transactions(self) -> int:
        """Transactions the invariant monitor began in the benchmark's database so far: a
        count of the database's transactions takes them off."""
        return 0 if self.monitor is None else self.monitor.transactions

    @property
    def kubeconfig(self) -> Path:
        return self.stack.config.kubeconfig

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def real_node(self) -> bool:
        return self.stack.config.real_node

    @property
    def host_for_pods(self) -> str:
        """The address pods reach this host at: the host's end of the real node's veth
        (loopback without a node, where no pod runs)."""
        return self.stack.config.apiserver_host

    @property
    def pod_database_url(self) -> str:
        """The runner login's URL as the runners' pods see it (their Secret)."""
        return self.logins.on_host(self.host_for_pods).runner

    def versions(self) -> dict[str, str]:
        info = client.VersionApi(self.api).get_code()
        return {"kubernetes": info.git_version, "postgresql": self.database.server["version"]}


@contextmanager
def bench_cluster(
    progress: Progress,
    *,
    report: Report,
    max_concurrency: int,
    server_url: str | None = None,
    node: NodeKind = "none",
) -> Iterator[BenchCluster]:
    """A control plane, the chart and a migrated database, all removed afterwards, watched
    by the invariant monitor throughout: its verdict goes into `report`.

    Without a node pods are created and never run. On a real node the database is on a
    server of the benchmark's own (pods must reach it), so `server_url` is refused there."""
    real = node == "containerd"
    if real and server_url is not None:
        raise ValueError("on the real node the benchmark runs a database server its pods reach")
    # Named by the process, as its database server's directory is (bench/pg.py): what a
    # run leaves behind is told from another run's at the same time.
    work_dir = Path(tempfile.mkdtemp(prefix=f"achilles-bench-{os.getpid()}-"))
    config = StackConfig(
        state_dir=work_dir / "stack",
        ports=Ports.free(),
        durable=True,
        with_postgres=False,
        node=node,
    )
    stack = LocalStack(config, report=progress)
    try:
        ensure_built(node=real, report=progress)
        stack.up()
        reach = LOOPBACK_ONLY
        if real:
            net = stack.config.network  # chosen by `up`
            reach = Reach(listen=(net.host_ip,), pod_networks=(net.pod_cidr, net.link_cidr))
        with (
            bench_database(progress, server_url, reach=reach) as database,
            api_client(stack.config.kubeconfig) as api,
        ):
            logins = grant_component_logins(
                database.url,
                prefix="achilles_bench",
                passwords={c: secrets.token_urlsafe(32) for c in Component},
            )
            cluster = BenchCluster(
                stack=stack, api=api, database=database, work_dir=work_dir, logins=logins
            )
            _install_chart(cluster, max_concurrency, progress)
            cluster.monitor = InvariantMonitor(
                database.libpq_dsn(), pod_lister(cluster.core, RUNS_NAMESPACE)
            ).start()
            try:
                yield cluster
            finally:
                verdict = cluster.monitor.stop()
                record_invariants(report, verdict)
                progress(verdict.line())
    finally:
        try:
            stack.down()
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
            progress("control plane stopped and its state removed")


def _install_chart(cluster: BenchCluster, max_concurrency: int, progress: Progress) -> None:
    values = {**local_values(with_database=False), "maxConcurrency": max_concurrency}
    install = ChartInstall(
        kubeconfig=cluster.kubeconfig,
        bin_dir=bin_dir(),
        values=values,
        helm_env={
            f"HELM_{kind}_HOME": str(cluster.work_dir / "helm" / kind.lower())
            for kind in ("CACHE", "CONFIG", "DATA")
        },
    )
    apply_crds(install)
    install_chart(install)
    _apply_secret(cluster.core, RUNS_NAMESPACE, RUNNER_DATABASE_SECRET, cluster.pod_database_url)
    progress(f"chart installed (maxConcurrency {max_concurrency}, operator Deployment off)")


def _apply_secret(core: client.CoreV1Api, namespace: str, name: str, url: str) -> None:
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data={"url": url})
    try:
        core.create_namespaced_secret(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def ensure_namespace(cluster: BenchCluster, name: str) -> None:
    try:
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise
