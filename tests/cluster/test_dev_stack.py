"""`achilles dev up/env/status/down` on stacks of the test's own, PostgreSQL included: a
second `up` changes nothing and `down` leaves no process of the stack behind (a stack
without a node: no root needed; the real node's own down is test_real_node_teardown.py),
and `dev up` converges the chart on the real node, as `make dev` runs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from achilles.cli.main import cli
from achilles.errors import LocalStackError
from achilles.k8s.client import api_client
from achilles_dev import postgres
from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE, ChartInstall, install_chart
from achilles_dev.chart_secrets import MIGRATIONS_DATABASE_SECRET, ensure_secret
from achilles_dev.chart_values import local_values
from achilles_dev.config import NodeKind, Ports, StackConfig
from achilles_dev.health import stack_checks
from achilles_dev.images import ENGINE_IMAGE
from achilles_dev.processes import read_pidfile
from achilles_dev.stack import LocalStack
from achilles_dev.stack_components import (
    CONTROL_PLANE_COMPONENTS,
    MODEL_SERVER,
    OIDC_PROVIDER,
    REAL_NODE_COMPONENTS,
)
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, external_kubeconfig
from tests.cluster.kube import process_is_gone
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def own_stack_of(state_dir: Path, node: NodeKind) -> Iterator[tuple[LocalStack, list[str]]]:
    lines: list[str] = []
    config = StackConfig(
        state_dir=state_dir,
        ports=Ports.free(),
        postgres_dir=postgres.default_data_root() / f"dev-test-{uuid.uuid4().hex[:8]}",
        durable=False,
        node=node,
    )
    stack = LocalStack(config, report=lines.append)
    try:
        yield stack, lines
    finally:
        # As recorded: a `dev up` of the test chose the node's network, which `down` removes.
        if (state_dir / "stack.json").exists():
            stack.config = StackConfig.load(state_dir)
        stack.down()
        shutil.rmtree(config.postgres_dir, ignore_errors=True)


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[tuple[LocalStack, list[str]]]:
    """PostgreSQL, the control plane, the model server and the OIDC provider: no node."""
    yield from own_stack_of(tmp_path / "state", "none")


@pytest.fixture
def own_real_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalStack, list[str]]]:
    """The whole of `make dev`'s stack, the real node included, of this test's own."""
    if external_kubeconfig() is not None or os.geteuid() != 0:
        pytest.skip(
            f"a stack of our own with a real node (needs root; {EXTERNAL_KUBECONFIG} unset)"
        )
    # Short: the kubelet's sockets live under it (under xdist, `popen-gwN/` is added).
    yield from own_stack_of(tmp_path_factory.mktemp("up") / "state", "containerd")


def test_up_is_idempotent_and_down_leaves_no_process(
    own_stack: tuple[LocalStack, list[str]],
) -> None:
    stack, lines = own_stack
    assert stack.up() is True
    component_pids = [
        read_pidfile(stack.config.pidfile(name))
        for name in (*CONTROL_PLANE_COMPONENTS, OIDC_PROVIDER)
    ]
    assert all(ref is not None for ref in component_pids)
    postmaster = int((stack.config.postgres_dir / "postmaster.pid").read_text().split()[0])
    # Every component logs under logs/, PostgreSQL too (docs/development.md).
    postgres_log = stack.config.logs_dir / "postgres.log"
    assert "database system is ready to accept connections" in postgres_log.read_text()

    lines.clear()
    assert stack.up() is False  # nothing started (`achilles dev up` still converges the chart)
    assert lines == [f"already running (state {stack.config.state_dir})"]

    env = CliRunner().invoke(cli, ["dev", "env", "--state-dir", str(stack.config.state_dir)])
    assert env.exit_code == 0, env.output
    assert f"export KUBECONFIG={stack.config.kubeconfig}" in env.output.splitlines()
    database = f"postgresql+psycopg://postgres@127.0.0.1:{stack.config.ports.postgres}/achilles"
    assert f"export ACHILLES_DATABASE_URL={database}" in env.output.splitlines()
    issuer = f"http://127.0.0.1:{stack.config.ports.oidc_provider}"
    assert f"export ACHILLES_OIDC_ISSUER={issuer}" in env.output.splitlines()

    status = CliRunner().invoke(cli, ["dev", "status", "--state-dir", str(stack.config.state_dir)])
    checks = {check.name: check for check in stack_checks(stack)}
    parts = ("postgres", *CONTROL_PLANE_COMPONENTS, MODEL_SERVER, OIDC_PROVIDER)
    assert {name: checks[name].state for name in parts} == dict.fromkeys(parts, "running")
    # Without the chart (this test's `up` is the stack's alone) the stack is not healthy.
    assert checks["release"].state == "not installed"
    assert status.exit_code == 1, status.output
    assert status.stderr == "error: not healthy: release, operator, api\n"

    stack.down()

    assert all(process_is_gone(ref.pid) for ref in component_pids if ref)
    assert process_is_gone(postmaster)
    assert not postgres.is_running(stack.config.postgres_dir)
    assert not any(c.running for c in stack.components())


def dev(*args: str) -> Result:
    return CliRunner().invoke(cli, ["dev", *args])


def healthy(stack: LocalStack) -> dict[str, str]:
    """The state of every part that is not healthy."""
    return {c.name: f"{c.state}: {c.detail}" for c in stack_checks(stack) if not c.healthy}


def migration_hook_exists(stack: LocalStack) -> bool:
    from kubernetes import client

    with api_client(stack.config.kubeconfig) as api:
        jobs = client.BatchV1Api(api).list_namespaced_job(RELEASE_NAMESPACE).items
    return any(job.metadata and (job.metadata.name or "").endswith("-migrate") for job in jobs)


@pytest.mark.timeout(1800)
def test_up_converges_the_chart_and_status_tells_the_truth(
    own_real_stack: tuple[LocalStack, list[str]],
) -> None:
    """A failed release, a deleted object of it, an interrupted helm and a stopped component
    are each shown by `dev status` (exit 1) and put right by the next `dev up`."""
    stack, _ = own_real_stack
    stack.config.save()  # so that `dev up --state-dir` finds this stack's ports
    state = ("--state-dir", str(stack.config.state_dir))
    kubeconfig = stack.config.kubeconfig

    def up_and_healthy() -> None:
        up = dev("up", *state)
        assert up.exit_code == 0, up.output
        # What `dev up` recorded: the node's network, chosen by the first (and `down`'s).
        stack.config = StackConfig.load(stack.config.state_dir)
        status = dev("status", *state)
        assert status.exit_code == 0, status.output
        assert healthy(stack) == {}

    up_and_healthy()
    checks = {check.name: check for check in stack_checks(stack)}
    assert checks["release"].state == "deployed"
    # The operator and the API as the chart's Deployments, from the engine image.
    assert checks["operator"].state == checks["api"].state == "ready"
    assert checks[MODEL_SERVER].state == "running"

    # A setting made the documented way survives the next `dev up` (only the stack's own
    # values are replaced), and so does a handover of AgentPlatform/default to kubectl.
    release = ChartInstall(kubeconfig=kubeconfig, bin_dir=bin_dir())
    release.helm(
        "upgrade", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE, "--reuse-values",
        "--set", "platform.timezone=Europe/Paris", "--set", "platform.create=false",
    )  # fmt: skip
    up_and_healthy()
    kept = yaml.safe_load(
        release.helm("get", "values", "-o", "yaml", "-n", RELEASE_NAMESPACE, RELEASE)
    )
    assert kept["platform"] == {"timezone": "Europe/Paris", "create": False}
    assert kept["operator"] == {"enabled": True}  # the stack's own value, still there
    release.helm(
        "upgrade", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE, "--reuse-values",
        "--set", "platform.create=true", "--force-conflicts",
    )  # fmt: skip
    platform = release.kubectl("get", "agentplatform", "default", "-o", "jsonpath={.spec.timezone}")
    assert platform == "Europe/Paris"

    # A release whose install failed (its migration hook could not reach the database).
    bad_url = "postgresql://nobody@127.0.0.1:1/none"
    install = ChartInstall(
        kubeconfig=kubeconfig,
        bin_dir=bin_dir(),
        values=local_values(with_database=True, image=ENGINE_IMAGE),
    )
    ensure_secret(kubeconfig, RELEASE_NAMESPACE, MIGRATIONS_DATABASE_SECRET, bad_url)
    with pytest.raises(LocalStackError, match="pre-upgrade hooks failed"):
        install_chart(install)
    status = dev("status", *state)
    assert status.exit_code == 1
    assert healthy(stack).keys() == {"release"}
    assert healthy(stack)["release"].startswith("failed:")
    up_and_healthy()

    # An object of the release deleted behind Helm's back.
    deleted = install.kubectl("delete", "clusterrole", "achilles-portal")
    assert "deleted" in deleted
    assert healthy(stack).keys() == {"release"}
    assert re.fullmatch(
        rf"incomplete: {RELEASE_NAMESPACE}/achilles revision \d+: missing "
        r"ClusterRole/achilles-portal; run `achilles dev up`",
        healthy(stack)["release"],
    )
    up_and_healthy()

    # A helm killed mid-upgrade leaves the release pending: nothing upgrades it any more.
    ensure_secret(kubeconfig, RELEASE_NAMESPACE, MIGRATIONS_DATABASE_SECRET, bad_url)
    helm = subprocess.Popen(
        [
            str(bin_dir() / "helm"), "--kubeconfig", str(kubeconfig), "upgrade", "achilles",
            str(CHART_DIR), "--namespace", RELEASE_NAMESPACE, "--set", "operator.enabled=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: migration_hook_exists(stack), 120, what="the upgrade's hook Job")
    finally:
        helm.kill()
        helm.wait()
    assert healthy(stack)["release"].startswith("pending-upgrade:")
    up_and_healthy()

    # A component that stopped.
    stack.stop_component("kube-controller-manager")
    assert healthy(stack) == {"kube-controller-manager": "stopped: run `achilles dev up`"}
    assert dev("status", *state).exit_code == 1
    up_and_healthy()

    # Everything stopped: status says so, and fails.
    stack.down()
    status = dev("status", *state)
    assert status.exit_code == 1
    assert {c.name for c in stack_checks(stack) if c.state == "stopped"} >= {
        "postgres", *REAL_NODE_COMPONENTS, MODEL_SERVER,
    }  # fmt: skip
