"""The chart, installed once per session into the cluster tier's control plane.

A real `helm install` of charts/achilles, as a platform operator would run it, minus
the operator and API Deployments (tests run no operator image): the CRDs from the chart's crds/
directory, RBAC, both admission policies, the runs namespace with its quota, and
AgentPlatform/default. The pre-install hook Job runs `achilles db upgrade` against a
fresh database of the test PostgreSQL, as the migrations' login (its own Secret, with the
superuser's password and the address pods reach the host at: the local node's end of its
veth, or kind's gateway), in the engine image; the operator
and the runs get logins of their own (`Release.login_url`, `Release.pod_login_url`), as
an installer makes them. The portal's ClusterRole is bound, by the chart's own value, to
the user the tests impersonate.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from sqlalchemy import Engine, create_engine

from achilles.db.roles import Component
from achilles_dev import postgres
from achilles_dev.admission import wait_until_policies_admit
from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE, ChartInstall
from achilles_dev.chart_secrets import DATABASE_SECRET_KEY, MIGRATIONS_DATABASE_SECRET
from achilles_dev.images import ENGINE_IMAGE
from achilles_dev.invariants import InvariantMonitor, pod_lister
from achilles_dev.logins import set_superuser_password, with_login
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import Cluster, fail_on_violations
from tests.cluster.install.api import Achilles, impersonating, verdict
from tests.conftest import create_database, drop_database
from tests.crd_cases import agent
from tests.db.logins import PASSWORD, login_url
from tests.waiting import wait_for

PORTAL_USER = "portal-bot"
ADMIN_USER, ADMIN_GROUP = "ann-admin", "achilles-admins"
POLICY_MESSAGE = "only members of achilles-admins may set or change spec.adminPaused"
RUNS_NAMESPACE = "achilles-runs"  # the chart's default, where the run pods are

# What the tests install: the chart's defaults plus what a test cluster needs.
TEST_VALUES: dict[str, Any] = {
    # The hook Job's image, loaded on the node (ours, kind's).
    "image": {
        "repository": ENGINE_IMAGE.rpartition(":")[0],
        "tag": ENGINE_IMAGE.rpartition(":")[2],
        "pullPolicy": "IfNotPresent",
    },
    "operator": {"enabled": False},
    # The API's Deployment is tested on a stack of its own (test_api_chart.py).
    "api": {"enabled": False},
    "rbac": {
        "portalSubjects": [
            {"kind": "User", "name": PORTAL_USER, "apiGroup": "rbac.authorization.k8s.io"}
        ]
    },
}


@dataclass(frozen=True)
class Release:
    install: ChartInstall
    database_url: str  # the migrations' login (the superuser): the tests' own checks, the CLI
    values_file: Path
    pod_host: str  # where the cluster's pods reach the test PostgreSQL (`Cluster.host_address`)

    def helm(self, *args: str) -> str:
        return self.install.helm(*args)

    def login_url(self, component: Component) -> str:
        """The URL of `component`'s own login (a member of its role only)."""
        return login_url(self.database_url, component)

    def pod_login_url(self, component: Component) -> str:
        """`component`'s login as the cluster's pods reach the server (its Secrets)."""
        return with_login(self.login_url(component), host=self.pod_host)


def _create_migrations_secret(api: client.ApiClient, url: str) -> None:
    """The migrations' Secret, which the pre-install hook reads (the operator is a
    process of the tests, with its login's URL in its environment)."""
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=RELEASE_NAMESPACE)))
    core.create_namespaced_secret(
        RELEASE_NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=MIGRATIONS_DATABASE_SECRET),
            string_data={DATABASE_SECRET_KEY: url},
        ),
    )


@pytest.fixture(scope="session")
def achilles_release(
    cluster: Cluster,
    postgres_server: postgres.LocalPostgres,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    database = create_database(postgres_server, "achilles_chart")
    url = postgres_server.url(database)
    home = tmp_path_factory.mktemp("helm")
    values_file = home / "values.yaml"
    values_file.write_text(yaml.safe_dump(TEST_VALUES))
    install = ChartInstall(
        kubeconfig=cluster.kubeconfig,
        bin_dir=bin_dir(),
        namespace=RELEASE_NAMESPACE,
        helm_env={
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        },
    )
    migrations_url = with_login(set_superuser_password(url, PASSWORD), host=cluster.host_address)
    _create_migrations_secret(cluster.api, migrations_url)
    install.helm(
        "install", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE,
        "--values", str(values_file), "--timeout", "3m",
    )  # fmt: skip
    release = Release(
        install=install, database_url=url, values_file=values_file, pod_host=cluster.host_address
    )
    _wait_until_admin_paused_policy_enforces(cluster)
    wait_until_platform_owner_enforces(cluster.kubeconfig)
    wait_until_policies_admit(cluster.kubeconfig)
    # The seed's invariants, watched while every test of the session runs against this
    # release (issue 36 item 10): a violation fails the session.
    monitor = InvariantMonitor(url, pod_lister(cluster.core, RUNS_NAMESPACE)).start()
    try:
        yield release
    finally:
        verdict = monitor.stop()
        install.helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
        drop_database(postgres_server, database)
    fail_on_violations(verdict, "the chart's cluster tests ran")


def _wait_until_admin_paused_policy_enforces(cluster: Cluster) -> None:
    """Policies take effect once the API server's informers load them: poll a dry run."""
    with impersonating(cluster.kubeconfig, PORTAL_USER) as portal:
        probe = agent(f"probe-{uuid.uuid4().hex[:6]}", adminPaused=True)
        wait_for(
            lambda: verdict(lambda: Achilles(portal).create(probe, "default", dry_run=True)),
            timeout=30,
            what="the adminPaused policy to refuse the portal",
        )


def wait_until_platform_owner_enforces(kubeconfig: Path) -> None:
    """The release owns AgentPlatform/default once its policy refuses a kubectl edit."""

    def refused() -> bool:
        probe = subprocess.run(
            [
                str(bin_dir() / "kubectl"), "--kubeconfig", str(kubeconfig), "patch",
                "agentplatform", "default", "--type=merge", "--dry-run=server",
                "-p", '{"spec":{"maxIterations":3}}',
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return "belongs to the Helm release" in probe.stderr

    wait_for(refused, timeout=30, what="the platform-owner policy to refuse kubectl")


@pytest.fixture(scope="module")
def journal(achilles_release: Release) -> Iterator[Engine]:
    """The release's journal database as the migrations' login (the superuser): what a
    test reads of the rows, or arranges in them."""
    engine = create_engine(
        achilles_release.database_url.replace("postgresql://", "postgresql+psycopg://")
    )
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def admin_api(cluster: Cluster) -> Achilles:
    """The cluster admin (the tests' own kubeconfig)."""
    return Achilles(cluster.api)


@pytest.fixture(scope="session")
def portal_api(cluster: Cluster, achilles_release: Release) -> Iterator[Achilles]:
    with impersonating(cluster.kubeconfig, PORTAL_USER) as api:
        yield Achilles(api)


@pytest.fixture(scope="session")
def achilles_admin_api(cluster: Cluster, achilles_release: Release) -> Iterator[Achilles]:
    """A member of the admin group (RBAC from the chart's admin binding)."""
    with impersonating(cluster.kubeconfig, ADMIN_USER, ADMIN_GROUP) as api:
        yield Achilles(api)
