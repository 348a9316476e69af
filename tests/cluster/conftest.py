"""Cluster tier: a real control plane (etcd, kube-apiserver, kube-controller-manager) and the
kubelet stand-in, started once per session by the same code as `achilles dev up`.

The session's stack has its own state directory and free loopback ports, so it never
collides with a developer's running `achilles dev up`. Each test gets a namespace of its
own. On a fresh machine the control-plane binaries are built first (during collection,
so the build does not count against any test's timeout).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from achilles.k8s.client import api_client
from achilles_dev.build import ensure_built, missing_binaries
from achilles_dev.config import Ports, StackConfig
from achilles_dev.stack import LocalStack


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.get_closest_marker("cluster") for item in session.items) and missing_binaries():
        ensure_built()


@dataclass(frozen=True)
class Cluster:
    stack: LocalStack
    api: client.ApiClient

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
    def pods_dir(self) -> Path:
        return self.stack.config.kubelet_dir / "pods"


def throwaway_stack(state_dir: Path) -> LocalStack:
    """A stack of its own (free ports, no fsync, no PostgreSQL: the db tier has its own)."""
    config = StackConfig(
        state_dir=state_dir, ports=Ports.free(), durable=False, with_postgres=False
    )
    return LocalStack(config)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ensure_built()
    stack = throwaway_stack(tmp_path_factory.mktemp("cluster"))
    stack.up()
    try:
        with api_client(stack.config.kubeconfig) as api:
            yield Cluster(stack=stack, api=api)
    finally:
        stack.down()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; deleting it afterwards also ends its pods' processes."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    cluster.core.delete_namespace(name)
