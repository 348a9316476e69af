"""`achilles dev up/env/down` on a stack of the test's own, PostgreSQL included: a second
`up` changes nothing, and `down` leaves no process of the stack or of its pods behind."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from achilles.cli.main import cli
from achilles.k8s.client import api_client
from achilles_dev import postgres
from achilles_dev.config import Ports, StackConfig
from achilles_dev.processes import read_pidfile
from achilles_dev.stack import COMPONENTS, LocalStack
from tests.cluster.kube import create_pod, gated_program, pid_from, pod_phase, process_is_gone
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[tuple[LocalStack, list[str]]]:
    lines: list[str] = []
    config = StackConfig(
        state_dir=tmp_path / "state",
        ports=Ports.free(),
        postgres_dir=postgres.default_data_root() / f"dev-test-{uuid.uuid4().hex[:8]}",
        durable=False,
        node="process",  # the real node's own up/down: test_real_node_teardown.py
    )
    stack = LocalStack(config, report=lines.append)
    try:
        yield stack, lines
    finally:
        stack.down()
        shutil.rmtree(config.postgres_dir, ignore_errors=True)


def test_up_is_idempotent_and_down_leaves_no_process(
    own_stack: tuple[LocalStack, list[str]], tmp_path: Path
) -> None:
    stack, lines = own_stack
    assert stack.up() is True
    component_pids = [read_pidfile(stack.config.pidfile(name)) for name in COMPONENTS]
    assert all(ref is not None for ref in component_pids)
    postmaster = int((stack.config.postgres_dir / "postmaster.pid").read_text().split()[0])

    lines.clear()
    assert stack.up() is False  # so `achilles dev up` skips the chart too: a true no-op
    assert lines == [f"already running (state {stack.config.state_dir}); nothing to do"]

    env = CliRunner().invoke(cli, ["dev", "env", "--state-dir", str(stack.config.state_dir)])
    assert env.exit_code == 0, env.output
    assert f"export KUBECONFIG={stack.config.kubeconfig}" in env.output.splitlines()
    database = f"postgresql+psycopg://postgres@127.0.0.1:{stack.config.ports.postgres}/achilles"
    assert f"export ACHILLES_DATABASE_URL={database}" in env.output.splitlines()

    status = CliRunner().invoke(cli, ["dev", "status", "--state-dir", str(stack.config.state_dir)])
    assert status.exit_code == 0, status.output
    states = {line.split()[0]: line.split()[1] for line in status.output.splitlines()[1:-1]}
    assert states == dict.fromkeys(("postgres", *COMPONENTS), "running")

    pid_file = tmp_path / "pid"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lingering"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "command": gated_program(pid_file, tmp_path / "never"),
                }
            ],
        },
    }
    with api_client(stack.config.kubeconfig) as api:
        from kubernetes import client

        create_pod(client.CoreV1Api(api), "default", pod)
        pod_pid = wait_for(lambda: pid_from(pid_file), 60, what="the pod's process to start")
        assert pod_phase(client.CoreV1Api(api), "default", "lingering") in ("Pending", "Running")

    stack.down()

    assert all(process_is_gone(ref.pid) for ref in component_pids if ref)
    assert process_is_gone(pod_pid)
    assert process_is_gone(postmaster)
    assert not postgres.is_running(stack.config.postgres_dir)
    assert not any(c.running for c in stack.components())
