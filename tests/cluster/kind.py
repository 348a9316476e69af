"""The cluster tier's kind path: `ACHILLES_TEST_CLUSTER=kind`.

The session's real-node cluster is then a kind cluster, created and deleted through
pytest-kind's `KindCluster`, on the node image `achilles dev kind-image` builds here
without a registry (`achilles_dev.kind_image`), with kind's podman provider. The engine
and runner images are loaded into it with `kind load image-archive`, as a user of kind
without Docker would. What the `node_cluster` tests then need is checked as for any
cluster (`check_node_cluster`), once the node is Ready and lists the runner image.

One kind cluster serves the whole session: the `cluster` fixture's API-server tests and
the chart's (`install/`) as well as the `node_cluster` tests. Its pods reach the host at
the gateway of kind's podman network (`KindSession.gateway`, read from podman, never
assumed), where the session's PostgreSQL then listens too (tests/cluster/conftest.py).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from achilles.errors import LocalStackError
from achilles.k8s.client import api_client
from achilles_dev.images import ENGINE_IMAGE, RUNNER_IMAGE
from achilles_dev.kind_build import kind_binary_path
from achilles_dev.kind_image import (
    ensure_host_ready,
    kind_variables,
    load_images,
    node_image,
    write_cluster_config,
)
from achilles_dev.podman_store import podman
from achilles_dev.versions import bin_dir
from tests.waiting import wait_for

# Creating the cluster (kubeadm init inside the node) and loading the images take about
# a minute each on a busy 2-core machine; the node lists an image at its next status.
_READY_TIMEOUT = 180


def _node_ready_with(api: client.ApiClient, image: str) -> bool:
    for node in client.CoreV1Api(api).list_node().items:
        status = node.status
        if status is None:
            continue
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        if ready and any(image in (i.names or []) for i in status.images or []):
            return True
    return False


@dataclass(frozen=True)
class KindSession:
    """The session's kind cluster, and where its pods reach the host."""

    name: str
    kubeconfig: Path
    gateway: str  # the host's address on kind's podman network (IPv4)
    subnet: str  # that network, e.g. 10.89.0.0/24: the node's (and, masqueraded, pods') source


def kind_network() -> tuple[str, str]:
    """The IPv4 gateway and subnet of the podman network kind put its node on (kind's
    `KIND_EXPERIMENTAL_PODMAN_NETWORK`, by default `kind`)."""
    name = os.environ.get("KIND_EXPERIMENTAL_PODMAN_NETWORK", "kind")
    document = json.loads(podman("network", "inspect", name))
    for subnet in document[0].get("subnets") or []:
        network = ipaddress.ip_network(subnet["subnet"])
        if network.version == 4 and subnet.get("gateway"):
            return str(subnet["gateway"]), str(network)
    raise LocalStackError(f"podman network {name} has no IPv4 subnet with a gateway: {document}")


@contextmanager
def kind_cluster(workdir: Path) -> Iterator[KindSession]:
    """A kind cluster for the session, with our images loaded."""
    from pytest_kind import KindCluster

    name = f"achilles-{uuid.uuid4().hex[:6]}"
    ensure_host_ready()
    config = write_cluster_config(workdir / "kind.yaml")
    kind = kind_binary_path()
    with kind_variables():
        cluster = KindCluster(
            name,
            kubeconfig=workdir / "kubeconfig",
            image=node_image(),
            kind_path=kind,
            kubectl_path=bin_dir() / "kubectl",
        )
        try:
            cluster.create(config_file=config)
            load_images(kind, name, [ENGINE_IMAGE, RUNNER_IMAGE])
            with api_client(cluster.kubeconfig_path) as api:
                wait_for(
                    lambda: _node_ready_with(api, RUNNER_IMAGE),
                    timeout=_READY_TIMEOUT,
                    what=f"kind cluster {name}: a Ready node listing {RUNNER_IMAGE}",
                    interval=1,
                )
            gateway, subnet = kind_network()
            yield KindSession(name, cluster.kubeconfig_path, gateway, subnet)
        finally:
            cluster.delete()
            # pytest-kind keeps a directory per cluster under ./.pytest-kind
            shutil.rmtree(cluster.path, ignore_errors=True)
            with suppress(OSError):
                cluster.path.parent.rmdir()
