"""What the cluster benchmarks share: a control plane of their own, the chart, the
operator as a process under its own identity, and the measurements around it.

- `bench_cluster`: a throwaway local stack on free ports, durable like a real one, with
  the chart installed (operator Deployment off, as `achilles dev up` does) and a durable
  PostgreSQL database of its own (`bench.pg`); everything is stopped and removed after.
  Its node is one of two:
  - "process" (the default): etcd, kube-apiserver, kube-controller-manager built from
    source and the kubelet stand-in, which runs the pods of `served_namespaces` only:
    elsewhere pods stay Pending, which is what a benchmark of Job creation wants (a
    thousand containers would swamp a small machine and measure it, not the operator);
  - "containerd": the real node of `achilles dev up` (kube-scheduler, containerd + runc,
    kubelet, kube-proxy in a network namespace of its own) running the locally built
    runner image, for what a user feels end to end. Its database server also listens on
    the host's end of the node's network and lets the pods in, as the dev stack's does;
    the runners' Secret and `BenchCluster.host_for_pods` name that address.
- `OperatorUnderTest`: `achilles operator` as a process (what the chart's Deployment
  runs), authenticated as a ServiceAccount of its own. FlowSchemas that match only that
  account, one per verb, make the API server count the operator's requests by verb in
  its own metrics (API Priority and Fairness), so nothing in the operator is changed to
  count them. Its RSS and CPU are sampled from /proc.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT, TIMESTAMP

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.k8s.client import api_client
from achilles.k8s.jobs import RUN_ID_LABEL
from achilles_dev.build import ensure_built
from achilles_dev.chart import (
    RELEASE_NAMESPACE,
    ChartInstall,
    apply_crds,
    install_chart,
    local_values,
)
from achilles_dev.config import NodeKind, Ports, StackConfig
from achilles_dev.logins import ComponentLogins, grant_component_logins
from achilles_dev.postgres import free_port
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir
from bench.jobwatch import SeenJob
from bench.pg import LOOPBACK_ONLY, BenchDatabase, Reach, bench_database
from bench.report import Report

RUNS_NAMESPACE = "achilles-runs"
RUNNER_SECRET = "achilles-runner-database"
GROUP, VERSION = "achilles.io", "v1alpha1"
OPERATOR_ACCOUNT = "achilles-bench-operator"
# One FlowSchema per verb class, matching only the operator's ServiceAccount.
COUNTED_VERBS: dict[str, list[str]] = {
    "watch": ["watch"],
    "list": ["list"],
    "get": ["get"],
    "create": ["create"],
    "patch": ["patch"],
    "update": ["update"],
    "delete": ["delete", "deletecollection"],
}
FLOW_SCHEMA_PREFIX = "bench-operator-"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Progress = Callable[[str], None]


@dataclass
class BenchCluster:
    stack: LocalStack
    api: client.ApiClient
    database: BenchDatabase
    work_dir: Path
    # The operator and the run pods connect as their own logins, as installed.
    logins: ComponentLogins

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
        """The address pods reach this host at: loopback for the stand-in's host
        processes, the host's end of the real node's veth for containers."""
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
    served_namespaces: tuple[str, ...],
    max_concurrency: int,
    server_url: str | None = None,
    node: NodeKind = "process",
) -> Iterator[BenchCluster]:
    """A control plane, the chart and a migrated database, all removed afterwards.

    `served_namespaces` are those whose pods the stand-in runs; a real node runs them all.
    On a real node the database is on a server of the benchmark's own (pods must reach
    it), so `server_url` is refused there."""
    real = node == "containerd"
    if real and server_url is not None:
        raise ValueError("on the real node the benchmark runs a database server its pods reach")
    work_dir = Path(tempfile.mkdtemp(prefix="achilles-bench-"))
    config = StackConfig(
        state_dir=work_dir / "stack",
        ports=Ports.free(),
        durable=True,
        with_postgres=False,
        node=node,
        # A namespace nobody uses when none is served: pods elsewhere stay Pending.
        kubelet_namespaces=served_namespaces or ("bench-no-pods",),
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
            yield cluster
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
    _apply_secret(cluster.core, RUNS_NAMESPACE, RUNNER_SECRET, cluster.pod_database_url)
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


# --- the operator's identity and its request counts ---------------------------------


def _operator_kubeconfig(cluster: BenchCluster) -> Path:
    """A kubeconfig for the operator's own ServiceAccount (cluster-admin, like the
    tests' operator; the chart's narrower RBAC is not what is measured here). Made once:
    an operator restarted under the same cluster (`bench intake`) reuses it."""
    path = cluster.work_dir / "operator.kubeconfig"
    if path.exists():
        return path
    core = cluster.core
    core.create_namespaced_service_account(
        RELEASE_NAMESPACE,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT)),
    )
    client.RbacAuthorizationV1Api(cluster.api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="ServiceAccount", name=OPERATOR_ACCOUNT, namespace=RELEASE_NAMESPACE
                )
            ],
        )
    )
    issued = core.create_namespaced_service_account_token(
        OPERATOR_ACCOUNT,
        RELEASE_NAMESPACE,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=24 * 3600)
        ),
    )
    assert issued.status is not None
    token = issued.status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    cluster_entry = admin["clusters"][0]
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {"cluster": cluster_entry["name"], "user": OPERATOR_ACCOUNT},
            }
        ],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _count_operator_requests(cluster: BenchCluster) -> None:
    flow = client.FlowcontrolApiserverV1Api(cluster.api)
    for index, (name, verbs) in enumerate(COUNTED_VERBS.items()):
        flow.create_flow_schema(
            client.V1FlowSchema(
                metadata=client.V1ObjectMeta(name=f"{FLOW_SCHEMA_PREFIX}{name}"),
                spec=client.V1FlowSchemaSpec(
                    matching_precedence=100 + index,  # before every default schema
                    priority_level_configuration=client.V1PriorityLevelConfigurationReference(
                        name="workload-high"
                    ),
                    distinguisher_method=client.V1FlowDistinguisherMethod(type="ByUser"),
                    rules=[
                        client.V1PolicyRulesWithSubjects(
                            subjects=[
                                client.FlowcontrolV1Subject(
                                    kind="ServiceAccount",
                                    service_account=client.V1ServiceAccountSubject(
                                        name=OPERATOR_ACCOUNT, namespace=RELEASE_NAMESPACE
                                    ),
                                )
                            ],
                            resource_rules=[
                                client.V1ResourcePolicyRule(
                                    verbs=verbs,
                                    api_groups=["*"],
                                    resources=["*"],
                                    namespaces=["*"],
                                    cluster_scope=True,
                                )
                            ],
                        )
                    ],
                ),
            )
        )


def apiserver_metrics(cluster: BenchCluster) -> str:
    """The API server's /metrics, read with the admin's credentials."""
    method, url, headers, _, _ = cluster.api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = cluster.api.call_api(method, url, header_params=headers)
    return bytes(response.read()).decode()  # type: ignore[no-untyped-call]


_METRIC_LINE = re.compile(
    r'^apiserver_flowcontrol_dispatched_requests_total\{[^}]*flow_schema="'
    + FLOW_SCHEMA_PREFIX
    + r'([a-z]+)"[^}]*\} ([0-9.e+]+)$'
)


def operator_request_counts(cluster: BenchCluster) -> dict[str, int]:
    """Requests the API server has dispatched for the operator so far, by verb."""
    counts = dict.fromkeys(COUNTED_VERBS, 0)
    for line in apiserver_metrics(cluster).splitlines():
        match = _METRIC_LINE.match(line)
        if match:
            counts[match.group(1)] += int(float(match.group(2)))
    return counts


def request_rates(
    before: dict[str, int], after: dict[str, int], seconds: float
) -> dict[str, float]:
    return {verb: round((after[verb] - before[verb]) / seconds, 3) for verb in before}


def etcd_sizes(cluster: BenchCluster) -> dict[str, int]:
    """etcd's database size, total and in use (bytes), from its own /metrics."""
    import urllib.request

    url = f"http://127.0.0.1:{cluster.stack.config.ports.etcd}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        metrics = response.read().decode()
    sizes = {}
    for name in ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"):
        match = re.search(rf"^{name} ([0-9.e+]+)$", metrics, re.MULTILINE)
        sizes[name.removeprefix("etcd_mvcc_")] = int(float(match.group(1))) if match else 0
    return sizes


def mean_object_bytes(cluster: BenchCluster, plural: str, sample: int = 100) -> float:
    """The mean JSON size of up to `sample` objects of a namespaced custom resource."""
    listing = cluster.custom.list_cluster_custom_object(GROUP, VERSION, plural, limit=sample)
    items = listing.get("items", []) if isinstance(listing, dict) else []
    if not items:
        return 0.0
    return sum(len(json.dumps(item, separators=(",", ":"))) for item in items) / len(items)


# --- the operator process ------------------------------------------------------------


@dataclass
class Usage:
    """One /proc sample of a process: RSS and cumulative CPU seconds."""

    at: float
    rss_mib: float
    cpu_s: float


def proc_usage(pid: int) -> Usage | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    fields = stat.rsplit(")", 1)[1].split()
    cpu_ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return Usage(at=time.monotonic(), rss_mib=rss_kib / 1024, cpu_s=cpu_ticks / CLOCK_TICKS)


@dataclass
class OperatorUnderTest:
    cluster: BenchCluster
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    samples: list[Usage] = field(default_factory=list)
    metrics_port: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def start(self) -> None:
        self.metrics_port = free_port()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "achilles", "operator", "--liveness", ""],
            env={**os.environ, **self.env, "ACHILLES_METRICS_PORT": str(self.metrics_port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            if self.process is None or self.process.poll() is not None:
                return
            usage = proc_usage(self.process.pid)
            if usage is not None:
                self.samples.append(usage)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"the operator exited; the end of its log:\n{self.log_tail()}")

    def usage(self) -> Usage:
        assert self.process is not None
        usage = proc_usage(self.process.pid)
        if usage is None:
            self.check_alive()
            raise RuntimeError("cannot read the operator's /proc entry")
        return usage

    def usage_over(self, seconds: float) -> tuple[float, float]:
        """(mean cores, peak RSS MiB) over the next `seconds`."""
        first = self.usage()
        peak = first.rss_mib
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            peak = max(peak, self.usage().rss_mib)
        last = self.usage()
        return (last.cpu_s - first.cpu_s) / (last.at - first.at), peak

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as response:
            text: str = response.read().decode()
        return text

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]

    def stop(self) -> None:
        self._stop.set()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@contextmanager
def running_operator(
    cluster: BenchCluster,
    progress: Progress,
    *,
    runner_command: str | None,
    runner_image: str = "achilles-runner:bench",
    **env: str,
) -> Iterator[OperatorUnderTest]:
    """`achilles operator` against the bench cluster and database, as its own account.

    `runner_command` None keeps the run Jobs' own command (`achilles runner`, the image's);
    the stand-in ignores images and needs a command runnable on this host."""
    counted = (cluster.work_dir / "operator.kubeconfig").exists()
    kubeconfig = _operator_kubeconfig(cluster)
    if not counted:
        _count_operator_requests(cluster)
    command = {} if runner_command is None else {"ACHILLES_RUNNER_COMMAND": runner_command}
    operator = OperatorUnderTest(
        cluster=cluster,
        env={
            "KUBECONFIG": str(kubeconfig),
            "ACHILLES_DATABASE_URL": cluster.logins.operator,
            "ACHILLES_RUNS_NAMESPACE": RUNS_NAMESPACE,
            "ACHILLES_RUNNER_IMAGE": runner_image,
            **command,
            **env,
        },
        log_path=cluster.work_dir / "operator.log",
    )
    operator.start()
    progress(f"operator started (pid {operator.process.pid if operator.process else '?'})")
    try:
        yield operator
    except BaseException:
        # Keep the log of a failed benchmark: the work directory goes with the stack.
        operator.stop()
        kept = Path(tempfile.gettempdir()) / f"achilles-bench-operator-{os.getpid()}.log"
        shutil.copyfile(operator.log_path, kept)
        progress(f"operator stopped; its log: {kept}")
        raise
    operator.stop()
    progress("operator stopped")


# --- Kubernetes objects in bulk ------------------------------------------------------


def create_all(
    items: list[Any], create: Callable[[Any], object], progress: Progress, what: str
) -> float:
    """Create `items` with 8 parallel clients' worth of calls; seconds it took."""
    started = time.monotonic()
    done = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(create, items):
            done += 1
            if done % 1000 == 0 or done == len(items):
                progress(f"created {done:,}/{len(items):,} {what}")
    return time.monotonic() - started


def agent_manifest(
    name: str, owner: str, model: str, schedule: dict[str, Any] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"owner": owner, "prompt": "Summarise my week.", "model": model}
    if schedule is not None:
        spec["schedule"] = schedule
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": spec,
    }


def model_manifest(name: str, base_url: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentModel",
        "metadata": {"name": name},
        "spec": {"baseURL": base_url, "model": "bench"},
    }


def create_model(cluster: BenchCluster, name: str, base_url: str) -> None:
    cluster.custom.create_cluster_custom_object(
        GROUP, VERSION, "agentmodels", model_manifest(name, base_url)
    )


def create_agent(cluster: BenchCluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "agents", manifest)


def wait_until(
    check: Callable[[], Any], timeout: float, what: str, progress: Progress, every: float = 1.0
) -> Any:
    """Poll `check` until it returns something truthy; report progress every 10 s."""
    started = time.monotonic()
    last_report = started
    while True:
        value = check()
        if value:
            return value
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        if now - last_report >= 10:
            progress(f"waiting for {what} ({now - started:.0f}s)")
            last_report = now
        time.sleep(every)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


# --- the journal, read and fast-forwarded --------------------------------------------


def insert_owners(database: Database, owners: int) -> None:
    """Owners `owner-1..owner-N` (standalone installs keep users in the journal)."""
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (key) SELECT 'owner-' || g "
                "FROM generate_series(1, CAST(:n AS bigint)) g"
            ),
            {"n": owners},
        )


def scheduled_agent_ids(database: Database) -> list[int]:
    """Agents the operator has given a slot, oldest first."""
    with database.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id FROM agents WHERE next_run_at IS NOT NULL ORDER BY id")
        ).scalars()
        return [int(row) for row in rows]


def fast_forward(database: Database, slots: dict[int, datetime]) -> None:
    """Move these agents' next slot to the given instants, in one statement.

    Schedules have minute (calendar) or hour (interval) granularity, so slots that fall
    every second for minutes cannot be written as CRs; the benchmark writes
    `next_run_at` the way the operator's scheduler itself does, and the operator takes
    it from there (the NOTIFY on `next_run_at` wakes its scheduler)."""
    ids = list(slots)
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE agents SET next_run_at = s.slot FROM unnest(:ids, :slots) AS s(id, slot) "
                "WHERE agents.id = s.id"
            ).bindparams(
                bindparam("ids", type_=ARRAY(BIGINT)),
                bindparam("slots", type_=ARRAY(TIMESTAMP(timezone=True))),
            ),
            {"ids": ids, "slots": [slots[i] for i in ids]},
        )


def run_states(database: Database) -> dict[str, int]:
    with database.engine.connect() as conn:
        rows = conn.execute(text("SELECT state, count(*) FROM agent_runs GROUP BY state")).all()
    return {str(state): int(count) for state, count in rows}


def report_timeline(
    report: Report, database: Database, jobs: list[SeenJob], prefix: str = ""
) -> None:
    """Where each run's slot -> Job time went, from the journal's own stamps: the
    scheduler's pass enqueued it (`created_at`, the pass's database clock), a dispatcher
    pass took it (`dispatched_at`, likewise), its Job's ADDED event arrived."""
    seen = {
        int(job.labels[RUN_ID_LABEL]): job.seen_at for job in jobs if RUN_ID_LABEL in job.labels
    }
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, scheduled_for, created_at, dispatched_at FROM agent_runs "
                "WHERE id = ANY(:ids) AND scheduled_for IS NOT NULL AND dispatched_at IS NOT NULL"
            ).bindparams(bindparam("ids", type_=ARRAY(BIGINT))),
            {"ids": list(seen)},
        ).all()
    if not rows:
        return
    report.latency(
        f"{prefix}slot -> run enqueued (scheduler pass)",
        [(r.created_at - r.scheduled_for).total_seconds() for r in rows],
        unit="s",
    )
    report.latency(
        f"{prefix}enqueued -> dispatcher pass",
        [(r.dispatched_at - r.created_at).total_seconds() for r in rows],
        unit="s",
    )
    report.latency(
        f"{prefix}dispatcher pass -> Job (watch event)",
        [seen[r.id] - r.dispatched_at.timestamp() for r in rows],
        unit="s",
        note="the Job create calls (8 in parallel) and the watch's delivery",
    )
