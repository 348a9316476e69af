"""The suite's own local stack: a real node, PostgreSQL, the chart, and the model endpoints.

`achilles chaos` brings up a stack of its own (free ports, its own state directory,
network namespace, cgroup subtree and PostgreSQL data directory), so it never touches a
developer's `achilles dev up` or a test session's stack, and tears it down afterwards.
Everything a scenario injects goes through here: the runner's container process (found
by its command line inside this node's cgroup subtree), PostgreSQL, the API server.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import api_client
from achilles_chaos.journal import Journal
from achilles_chaos.kube import RUNS_NAMESPACE, Kube, manifest
from achilles_chaos.models import BrokenModel, ModelServer
from achilles_chaos.waiting import wait_for
from achilles_dev import postgres
from achilles_dev.admission import wait_until_policies_admit
from achilles_dev.chart import ChartInstall, apply_crds, install_chart
from achilles_dev.chart_secrets import (
    DATABASE_SECRET_KEY,
    MIGRATIONS_DATABASE_SECRET,
    RUNNER_DATABASE_SECRET,
)
from achilles_dev.chart_values import local_values
from achilles_dev.config import Ports, StackConfig
from achilles_dev.images import ENGINE_IMAGE
from achilles_dev.invariants import InvariantMonitor, pod_lister
from achilles_dev.logins import ComponentLogins, stack_logins
from achilles_dev.node import host
from achilles_dev.node.network import stack_id
from achilles_dev.processes import is_alive, running_from_pidfile, signal_group
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir

Report = Callable[[str], None]

# Runs executing at once that the suite may ask for: the runs namespace's pod quota.
QUOTA_PODS = 24
# AgentPlatform/default as the suite creates it, and as every scenario leaves it: a cap as
# large as the quota, so a scenario's runs never wait for room unless it sets a smaller
# one (a cap of the chart's default 4 kept 2 of 6 runs queued for a 90 s hold).
SUITE_PLATFORM: dict[str, int] = {
    "maxConcurrency": QUOTA_PODS,
    "runTimeoutSeconds": 900,
    "maxIterations": 8,
    "weeklyTokenBudget": 200000,
}


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "achilles" / "chaos"


def _config(state_dir: Path) -> StackConfig:
    if (state_dir / "stack.json").exists():
        config = StackConfig.load(state_dir)
        # A kept stack's ports: while this run lasts no other stack chooses them, even
        # while a scenario has a component down.
        config.ports.lease()
        return config
    return StackConfig(
        state_dir=state_dir,
        ports=Ports.free(),
        postgres_dir=postgres.default_data_root() / f"chaos-{stack_id(state_dir)}",
        durable=False,
        with_postgres=True,
        node="containerd",
    )


@dataclasses.dataclass
class ChaosCluster:
    stack: LocalStack
    workdir: Path
    kube: Kube
    journal: Journal
    models: ModelServer
    broken: BrokenModel
    # Each component's database URL on loopback (the operators the suite starts use the
    # operator's login, run pods the runner's: the roles are part of what is tested).
    logins: ComponentLogins
    # Whether platform_settings holds SUITE_PLATFORM. A scenario that changed the platform
    # puts the CR back at its clean-up; the next scenario's first operator mirrors it,
    # and `Context.operator` waits for that before the scenario goes on.
    platform_mirrored: bool = False
    # The scenarios' namespaces, deleted at their clean-ups and gone in the background.
    deleted_namespaces: list[str] = dataclasses.field(default_factory=list)

    # --- up and down --------------------------------------------------------------------

    @classmethod
    def up(cls, state_dir: Path, report: Report) -> ChaosCluster:
        stack = LocalStack(_config(state_dir), report=report)
        stack.up()
        workdir = state_dir / "chaos"
        workdir.mkdir(parents=True, exist_ok=True)
        api = api_client(stack.config.kubeconfig)
        kube = Kube(api)
        logins = stack_logins(stack.config)
        _install_chart(stack, kube, logins.on_host(stack.config.apiserver_host), report)
        host_ip = stack.config.network.host_ip
        models = ModelServer.start(host_ip, workdir)
        broken = BrokenModel(host_ip)
        report(f"model server {models.base_url}; broken endpoint on {host_ip}:{broken.port}")
        journal = Journal(stack.config.database_url)
        return cls(stack, workdir, kube, journal, models, broken, logins)

    def down(self, *, keep: bool) -> None:
        self.models.stop()
        self.broken.stop()
        if keep:  # a stack kept for the next run: clean, its scenarios' namespaces gone
            wait_for(
                lambda: not any(map(self.kube.namespace_exists, self.deleted_namespaces)),
                180,
                what="the scenarios' namespaces to go",
                interval=1,
            )
            self.kube.api.close()  # type: ignore[no-untyped-call]
            return
        self.kube.api.close()  # type: ignore[no-untyped-call]
        self.stack.down()
        shutil.rmtree(self.stack.config.postgres_dir, ignore_errors=True)
        shutil.rmtree(self.stack.config.state_dir, ignore_errors=True)

    # --- between scenarios ----------------------------------------------------------------

    def fault(self) -> str | None:
        """What a scenario left broken in the stack, or None when every component runs and
        the API server and PostgreSQL answer."""
        down = [component.name for component in self.stack.components() if not component.running]
        if down:
            return f"not running: {', '.join(down)}"
        if not postgres.is_running(self.config.postgres_dir) or not self.journal.reachable():
            return "PostgreSQL does not answer"
        if not self.stack.apiserver_ready():
            return "kube-apiserver is not ready"
        return None

    def repair(self) -> None:
        """Start whatever is down, as `achilles dev up` does, and wait until the API server
        admits the catalogue's kinds again (its policies' informers start afresh)."""
        self.stack.up()
        wait_until_policies_admit(self.config.kubeconfig)
        self.platform_mirrored = False

    # --- what scenarios use --------------------------------------------------------------

    @property
    def config(self) -> StackConfig:
        return self.stack.config

    @property
    def kubeconfig(self) -> Path:
        return self.stack.config.kubeconfig

    @property
    def database_url(self) -> str:
        """The admin's (the superuser on loopback): the person's CLI, the journal checks."""
        return self.stack.config.database_url

    @property
    def operator_database_url(self) -> str:
        return self.logins.operator

    def invariant_monitor(self) -> InvariantMonitor:
        """The seed's invariants over this stack's journal and run pods (issue 36 item
        10), not yet started: the suite runs one around each scenario."""
        return InvariantMonitor(self.database_url, pod_lister(self.kube.core, RUNS_NAMESPACE))

    def runner_pids(self) -> dict[int, list[int]]:
        """run id -> host pids of `achilles runner --run-id N` in this node's containers
        (usually one; two while Kubernetes runs a Job's pod twice, the second exiting
        once it finds the run claimed)."""
        found: dict[int, list[int]] = {}
        for pid in host.cgroup_processes(self.stack.node().cgroup_root):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"runner" in argv and b"--run-id" in argv:
                index = argv.index(b"--run-id") + 1
                if index < len(argv) and argv[index].isdigit():
                    found.setdefault(int(argv[index]), []).append(pid)
        return found

    # --- PostgreSQL -----------------------------------------------------------------------

    def stop_postgres(self) -> None:
        """`pg_ctl stop -m fast`: every connection is cut, the server is gone."""
        postgres.stop(self.config.postgres_dir)

    def start_postgres(self) -> None:
        net = self.config.network
        postgres.ensure_running(
            self.config.postgres_dir,
            self.config.ports.postgres,
            durable=self.config.durable,
            listen=(net.host_ip,),
            pod_networks=(net.pod_cidr, net.link_cidr),
        )

    # --- the API server -------------------------------------------------------------------

    def kill_apiserver(self) -> None:
        """SIGKILL, as a crashed or OOM-killed API server dies."""
        pidfile = self.config.pidfile("kube-apiserver")
        process = running_from_pidfile(pidfile)
        if process is None:
            raise RuntimeError("kube-apiserver is not running")
        signal_group(process, signal.SIGKILL)
        wait_for(lambda: not is_alive(process), 30, what="kube-apiserver to die")
        pidfile.unlink(missing_ok=True)

    def start_apiserver(self) -> float:
        """Start it again exactly as the stack does (a start that exits says why, with its
        log's last lines); seconds until it is ready."""
        started = time.monotonic()
        self.stack.start_apiserver()
        # Ready is not yet admitting: a restarted API server refuses AgentModels until
        # the policy's informer found the CRD again (the next scenario was refused).
        wait_until_policies_admit(self.config.kubeconfig)
        return time.monotonic() - started


def _install_chart(
    stack: LocalStack, kube: Kube, database: ComponentLogins, report: Report
) -> None:
    """The chart as `achilles dev up` installs it, with two differences: no operator
    Deployment (the suite runs each scenario's operators as processes it can configure,
    kill and restart), and the runs namespace's pod quota (the chart sizes it from
    maxConcurrency) as large as the largest cap a scenario sets."""
    values = local_values(with_database=True, image=ENGINE_IMAGE)
    values["operator"] = {"enabled": False}
    values["maxConcurrency"] = QUOTA_PODS
    # The scenarios set AgentPlatform/default themselves: the chart's documented handover
    # to kubectl (platform.create=false), or its policy would refuse their patches.
    values["platform"] = {"create": False}
    install = ChartInstall(kubeconfig=stack.config.kubeconfig, bin_dir=bin_dir(), values=values)
    apply_crds(install)
    kube.create_namespace(install.namespace)
    _secret(kube, install.namespace, MIGRATIONS_DATABASE_SECRET, database.migrations)
    install_chart(install, extra_args=("--force-conflicts",))
    if kube.get("AgentPlatform", "default") is None:
        kube.create(manifest("AgentPlatform", "default", SUITE_PLATFORM))
    else:  # a kept stack: whatever an interrupted run left there
        kube.patch("AgentPlatform", "default", {"spec": SUITE_PLATFORM})
    _secret(kube, RUNS_NAMESPACE, RUNNER_DATABASE_SECRET, database.runner)
    report(f"chart: release {install.release} (no operator Deployment), run pod quota {QUOTA_PODS}")


def _secret(kube: Kube, namespace: str, name: str, url: str) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        string_data={DATABASE_SECRET_KEY: url},
    )
    try:
        kube.core.create_namespaced_secret(namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise
        kube.core.replace_namespaced_secret(name, namespace, body)
