"""Cluster tier: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) and a real node (containerd + runc, kubelet, kube-proxy) running the
locally built images, started once per session by the same code as `make dev`
(`achilles dev up`). Both `cluster` and `node_cluster` are that one stack: pods are
containers of the project's images, reaching this machine (the tier's PostgreSQL, model
and MCP servers) at the host's end of the node's veth (`Cluster.host_address`).

The session stack has its own state directory, free loopback ports, network namespace
and cgroup subtree, so it never collides with a developer's running `achilles dev up`.
Each test gets a namespace of its own. The tier's PostgreSQL (`postgres_server`) also
listens on the node's network and takes a password (SCRAM) from the pods' networks, so
pods log in with their logins' passwords while the tests on loopback stay trusted. On a
fresh machine the binaries and images are built first, during collection, so the build
does not count against any test's timeout. The real node needs root: without it the
tier is skipped.

Any cluster, not only ours: with `ACHILLES_TEST_KUBECONFIG=<kubeconfig>` the
`node_cluster` tests run against that cluster instead (a running `achilles dev up`, a
kind cluster, ...). What they need from it is checked before the first test: the API
answers, a Ready schedulable node, and the runner image (`ACHILLES_TEST_RUNNER_IMAGE`,
default the local build's name) present on that node. The `cluster` tests are skipped
there: their pods reach the tier's own PostgreSQL.

kind: with `ACHILLES_TEST_CLUSTER=kind` both `cluster` and `node_cluster` are one kind
cluster the session creates and deletes through pytest-kind, on a node image built here
(`tests/cluster/kind.py`, `achilles dev kind-image`; docs/development.md, "kind"). The
node image is built during collection. The tier's PostgreSQL then listens on kind's
gateway instead. `ACHILLES_TEST_CLUSTER=local` (or unset) is the local stack.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import api_client
from achilles_dev import postgres
from achilles_dev.build import ensure_built, missing_binaries
from achilles_dev.config import Ports, StackConfig
from achilles_dev.images import RUNNER_IMAGE
from achilles_dev.invariants import InvariantMonitor, Pods, Verdict, pod_lister
from achilles_dev.stack import LocalStack
from tests.conftest import session_postgres

if TYPE_CHECKING:
    from tests.cluster.kind import KindSession

EXTERNAL_KUBECONFIG = "ACHILLES_TEST_KUBECONFIG"
CLUSTER_CHOICE = "ACHILLES_TEST_CLUSTER"


def external_kubeconfig() -> Path | None:
    value = os.environ.get(EXTERNAL_KUBECONFIG)
    return Path(value) if value else None


def kind_requested() -> bool:
    """`ACHILLES_TEST_CLUSTER=kind`: the real-node tests on a kind cluster of the session."""
    value = os.environ.get(CLUSTER_CHOICE, "local") or "local"
    if value not in ("local", "kind"):
        raise pytest.UsageError(f"{CLUSTER_CHOICE} must be local or kind, not {value!r}")
    if value == "kind" and external_kubeconfig() is not None:
        raise pytest.UsageError(f"set {CLUSTER_CHOICE}=kind or {EXTERNAL_KUBECONFIG}, not both")
    return value == "kind"


def runs_elsewhere() -> bool:
    """The session's cluster is not a local stack of ours (a given kubeconfig, or kind)."""
    return external_kubeconfig() is not None or kind_requested()


def runner_image() -> str:
    return os.environ.get("ACHILLES_TEST_RUNNER_IMAGE", RUNNER_IMAGE)


def pytest_collection_finish(session: pytest.Session) -> None:
    items = [item for item in session.items if item.get_closest_marker("cluster")]
    # The session stack's tests (the tier's PostgreSQL listens on its node's network);
    # without root they skip (`local_stack`).
    wants_stack = os.geteuid() == 0 and any(
        SESSION_STACK_FIXTURES & set(getattr(item, "fixturenames", ())) for item in items
    )
    needs_node = wants_stack and not runs_elsewhere()
    wants_kind = kind_requested() and wants_stack
    # Without root (or elsewhere) the stacks of their own that need no node still start:
    # the control plane's binaries (test_dev_stack, the benchmarks of Job creation).
    if items and missing_binaries(node=needs_node):
        ensure_built(node=needs_node)
    if needs_node:
        from achilles_dev.images import ensure_images

        ensure_images(report=_summary)
    if wants_kind:
        from achilles_dev.kind_image import ensure_node_image

        ensure_node_image(report=_summary)


SESSION_STACK_FIXTURES = frozenset({"cluster", "node_cluster", "postgres_server"})


def _summary(line: str) -> None:
    """Progress of a build during collection: the summary lines, not every build step."""
    if not line.startswith(" "):
        print(line, flush=True)


@dataclass(frozen=True)
class Cluster:
    """The session's API server: our stack with its real node, or kind."""

    api: client.ApiClient
    kubeconfig: Path
    # Where the cluster's pods reach this machine (its PostgreSQL, model and MCP servers):
    # the host's end of the real node's veth; kind's, its podman network's gateway.
    host_address: str
    stack: LocalStack | None  # the session's local stack; None on kind

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)


def throwaway_stack(state_dir: Path) -> LocalStack:
    """A stack of its own with a real node (free ports, no fsync, no PostgreSQL: the tier
    has its own)."""
    config = StackConfig(
        state_dir=state_dir, ports=Ports.free(), durable=False, with_postgres=False
    )
    return LocalStack(config)


@pytest.fixture(scope="session")
def kind_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindSession]:
    """The session's one kind cluster (`cluster` and `node_cluster` on kind)."""
    if os.geteuid() != 0:
        pytest.skip("kind runs its node with podman on the root image store here: needs root")
    from tests.cluster.kind import kind_cluster

    with kind_cluster(tmp_path_factory.mktemp("kind")) as kind:
        yield kind


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The session's one local stack: control plane and real node, as `make dev` runs
    them (`cluster` and `node_cluster` on this machine)."""
    if os.geteuid() != 0:
        pytest.skip(f"a real node needs root; or point {EXTERNAL_KUBECONFIG} at a cluster")
    stack = throwaway_stack(tmp_path_factory.mktemp("cluster"))
    try:
        stack.up()
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> Iterator[postgres.LocalPostgres]:
    """The session's PostgreSQL for the cluster tier: the one of tests/conftest.py, but
    also listening where the session cluster's pods reach this machine (the local
    stack's node network, or kind's gateway) and taking a password (SCRAM) from the
    pods' networks, so the chart's pods (the migration Job, runs) log in with their
    logins' passwords while the tests on loopback stay trusted."""
    if os.geteuid() != 0 or external_kubeconfig() is not None:
        server: postgres.LocalPostgres = request.getfixturevalue("postgres_server")
        yield server
        return
    if kind_requested():
        kind: KindSession = request.getfixturevalue("kind_session")
        listen: tuple[str, ...] = (kind.gateway,)
        pod_networks: tuple[str, ...] = (kind.subnet,)
    else:
        stack: LocalStack = request.getfixturevalue("local_stack")
        net = stack.config.network
        listen, pod_networks = (net.host_ip,), (net.pod_cidr, net.link_cidr)
    with session_postgres(listen=listen, pod_networks=pod_networks) as server:
        yield server


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if kind_requested():
        kind: KindSession = request.getfixturevalue("kind_session")
        with api_client(kind.kubeconfig) as api:
            yield Cluster(
                api=api, kubeconfig=kind.kubeconfig, host_address=kind.gateway, stack=None
            )
        return
    if external_kubeconfig() is not None:
        pytest.skip(
            f"its pods reach the tier's own PostgreSQL, which {EXTERNAL_KUBECONFIG}'s "
            "cluster does not: the local stack or kind"
        )
    stack: LocalStack = request.getfixturevalue("local_stack")
    with api_client(stack.config.kubeconfig) as api:
        yield Cluster(
            api=api,
            kubeconfig=stack.config.kubeconfig,
            host_address=stack.config.apiserver_host,
            stack=stack,
        )


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; deleting it afterwards also deletes its pods."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    cluster.core.delete_namespace(name)


def fail_on_violations(verdict: Verdict, what: str) -> None:
    """Fail (without a traceback) when the invariant monitor saw the seed's rules break."""
    if not verdict.passed:
        pytest.fail(
            f"the seed's invariants broke while {what} ({verdict.samples} samples):\n"
            + "\n".join(verdict.violations),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def watched_journal(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every cluster test that writes the session's journal (`db`) runs under the seed's
    invariant monitor (issue 36 item 10), over that journal and the run pods of its own
    namespace; a violation fails the test. The chart's session (`achilles_release`) and
    the stacks of their own (the demo, the fault suite, the benchmarks) have one each."""
    if "db" not in request.fixturenames:
        yield
        return
    # Set up first and torn down after: the monitor's window holds no emptying of the
    # journal between tests.
    request.getfixturevalue("db")
    url: str = request.getfixturevalue("database_url")
    pods: Callable[[], Pods] = list
    if "namespace" in request.fixturenames:
        cluster: Cluster = request.getfixturevalue("cluster")
        pods = pod_lister(cluster.core, request.getfixturevalue("namespace"))
    monitor = InvariantMonitor(url, pods).start()
    yield
    fail_on_violations(monitor.stop(), f"{request.node.name} ran")


@dataclass(frozen=True)
class NodeCluster:
    """A cluster with a real container runtime: our throwaway real node, or any cluster."""

    api: client.ApiClient
    kubeconfig: Path
    runner_image: str
    stack: LocalStack | None  # None: an existing cluster from ACHILLES_TEST_KUBECONFIG

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)


def check_node_cluster(api: client.ApiClient, image: str) -> None:
    """What the node tests need from a cluster, checked up front with one clear failure."""
    core = client.CoreV1Api(api)
    try:
        nodes = core.list_node().items
    except (ApiException, OSError) as error:
        pytest.fail(
            f"{EXTERNAL_KUBECONFIG}: the API server does not answer: {error}", pytrace=False
        )
    ready = [
        node
        for node in nodes
        if not (node.spec and node.spec.unschedulable)
        and any(
            c.type == "Ready" and c.status == "True"
            for c in (node.status.conditions if node.status else None) or []
        )
    ]
    if not ready:
        pytest.fail(f"{EXTERNAL_KUBECONFIG}: no Ready, schedulable node", pytrace=False)
    with_image = [
        node
        for node in ready
        if node.status and any(image in (i.names or []) for i in node.status.images or [])
    ]
    if not with_image:
        pytest.fail(
            f"{EXTERNAL_KUBECONFIG}: no Ready node has the runner image {image} "
            "(load it, e.g. `kind load docker-image`, or set ACHILLES_TEST_RUNNER_IMAGE)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def node_cluster(request: pytest.FixtureRequest) -> Iterator[NodeCluster]:
    external = external_kubeconfig()
    if external is not None:
        with api_client(external) as api:
            check_node_cluster(api, runner_image())
            yield NodeCluster(api=api, kubeconfig=external, runner_image=runner_image(), stack=None)
        return
    if os.geteuid() != 0:
        pytest.skip(f"a real node needs root; or point {EXTERNAL_KUBECONFIG} at a cluster")
    if kind_requested():
        kind: KindSession = request.getfixturevalue("kind_session")
        with api_client(kind.kubeconfig) as api:
            check_node_cluster(api, RUNNER_IMAGE)
            yield NodeCluster(
                api=api, kubeconfig=kind.kubeconfig, runner_image=RUNNER_IMAGE, stack=None
            )
        return
    stack: LocalStack = request.getfixturevalue("local_stack")  # the same stack as `cluster`
    with api_client(stack.config.kubeconfig) as api:
        yield NodeCluster(
            api=api, kubeconfig=stack.config.kubeconfig, runner_image=RUNNER_IMAGE, stack=stack
        )


@pytest.fixture
def node_namespace(node_cluster: NodeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the real node's cluster; deleted (with its pods) afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    node_cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    node_cluster.core.delete_namespace(name)
