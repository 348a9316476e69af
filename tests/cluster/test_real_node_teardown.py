"""`achilles dev up` with a real node, beside the session's own, and `down` leaving nothing:
no process, mount, cgroup, network namespace, link, route or iptables rule of it.

The stack here runs PostgreSQL too, which its pods reach on the host's end of the node's
veth, as they reach the offline model server there; the session's real node keeps working
while this one comes and goes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from achilles.k8s.client import api_client
from achilles_dev import postgres
from achilles_dev.config import Ports, StackConfig
from achilles_dev.images import ENGINE_IMAGE
from achilles_dev.logins import stack_logins, with_login
from achilles_dev.node import host, network
from achilles_dev.processes import read_pidfile
from achilles_dev.stack import LocalStack
from achilles_dev.stack_components import REAL_NODE_COMPONENTS
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, NodeCluster, kind_requested
from tests.cluster.kube import create_pod, pod_phase, present, process_is_gone
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def iptables_rules() -> str:
    """The host's (root namespace's) rules, without counters or timestamps."""
    dumped = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True)
    return "\n".join(line for line in dumped.stdout.splitlines() if not line.startswith(("#", ":")))


@pytest.fixture
def own_stack(
    tmp_path_factory: pytest.TempPathFactory, node_cluster: NodeCluster
) -> Iterator[LocalStack]:
    if node_cluster.stack is None and not kind_requested():
        pytest.skip(
            f"brings up a local real node beside the session's; {EXTERNAL_KUBECONFIG} is set"
        )
    config = StackConfig(
        # Short: the kubelet's sockets live under it (under xdist, `popen-gwN/` is added).
        state_dir=tmp_path_factory.mktemp("down") / "state",
        ports=Ports.free(),
        postgres_dir=postgres.default_data_root() / f"node-test-{uuid.uuid4().hex[:8]}",
        durable=False,
        node="containerd",
    )
    stack = LocalStack(config, report=lambda _line: None)
    try:
        yield stack
    finally:
        stack.down()
        shutil.rmtree(config.postgres_dir, ignore_errors=True)


@contextmanager
def model_server(host_ip: str) -> Iterator[str]:
    """`achilles model-server` (the demo script) on the host's end of the node's veth."""
    with socket.socket() as probe:
        probe.bind((host_ip, 0))
        port = probe.getsockname()[1]
    achilles = Path(sys.executable).with_name("achilles")
    server = subprocess.Popen(
        [str(achilles), "model-server", "--host", host_ip, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _answers(f"http://{host_ip}:{port}/healthz"), 30.0, what="model server")
        yield f"http://{host_ip}:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def pod(name: str, command: list[str], **env: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": ENGINE_IMAGE,
                    "command": command,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                }
            ],
        },
    }


def test_down_leaves_nothing_behind(own_stack: LocalStack, node_cluster: NodeCluster) -> None:
    iptables_before = iptables_rules()
    assert own_stack.up() is True
    config = own_stack.config
    net, node = config.network, own_stack.node()
    assert network.is_up(net)
    if node_cluster.stack is not None:  # else the session's node is kind's
        assert net != node_cluster.stack.config.network

    with api_client(config.kubeconfig) as api:
        core = client.CoreV1Api(api)
        # PostgreSQL on the host, as the chart's Secrets give it to pods: a component's
        # login with its password (SCRAM); without one, not even the superuser gets in.
        query = (
            "import os, psycopg\n"
            "try:\n"
            "    psycopg.connect(os.environ['NO_PASSWORD'], connect_timeout=10)\n"
            "    print('no password: let in')\n"
            "except psycopg.OperationalError as error:\n"
            "    print('no password:', 'no password supplied' in str(error))\n"
            "url = os.environ['URL'].replace('postgresql+psycopg://', 'postgresql://')\n"
            "with psycopg.connect(url) as c:\n"
            "    print(c.execute('select current_user, current_database()').fetchone())\n"
        )
        pod_logins = stack_logins(config).on_host(config.apiserver_host)
        superuser = with_login(pod_logins.migrations, password="")
        plain = superuser.replace("postgresql+psycopg://", "postgresql://")
        create_pod(
            core,
            "default",
            pod("db", ["python", "-c", query], URL=pod_logins.runner, NO_PASSWORD=plain),
        )
        wait_for(
            lambda: pod_phase(core, "default", "db") in ("Succeeded", "Failed"),
            120.0,
            what="the database pod to finish",
        )
        log = core.read_namespaced_pod_log("db", "default")
        assert pod_phase(core, "default", "db") == "Succeeded", log
        assert log.splitlines()[-2:] == [
            "no password: True",
            "('achilles_dev_runner', 'achilles')",
        ], log

        # The offline model server on the host, listening where pods reach the host.
        with model_server(net.host_ip) as base_url:
            models = (
                "import openai\n"
                "client = openai.OpenAI(base_url=__import__('os').environ['BASE'], api_key='x')\n"
                "print(len(client.models.list().data))\n"
            )
            create_pod(core, "default", pod("model", ["python", "-c", models], BASE=base_url))
            wait_for(
                lambda: pod_phase(core, "default", "model") in ("Succeeded", "Failed"),
                120.0,
                what="the model-server pod to finish",
            )
            log = core.read_namespaced_pod_log("model", "default")
            assert pod_phase(core, "default", "model") == "Succeeded", log
            assert int(log.split()[-1]) >= 1

        # A container still running when the stack goes down.
        hang = ["python", "-c", "import time\nwhile True:\n    time.sleep(60)\n"]
        create_pod(core, "default", pod("lingering", hang))
        wait_for(
            lambda: pod_phase(core, "default", "lingering") == "Running",
            120.0,
            what="the lingering pod to run",
        )
    pods = host.cgroup_processes(node.cgroup_root)
    shims = host.shims_of(node.layout.containerd_socket)
    components = [read_pidfile(config.pidfile(name)) for name in REAL_NODE_COMPONENTS]
    assert pods
    assert shims
    assert all(components)
    postmaster = int((config.postgres_dir / "postmaster.pid").read_text().split()[0])

    own_stack.down()

    assert all(process_is_gone(ref.pid) for ref in components if ref)
    assert all(process_is_gone(pid) for pid in pods)
    assert all(process_is_gone(shim.pid) for shim in shims)
    assert process_is_gone(postmaster)
    assert host.mounts_under(config.state_dir) == []
    assert host.cgroup_leftovers(node.cgroup_root) == []
    assert not net.netns_path.exists()
    assert not network.link_exists(net.host_veth)
    assert network.leftovers(net) == []
    assert host.stray_files(node.layout.pod_logs, net.cni_network) == []
    assert iptables_rules() == iptables_before
    assert node.leftovers() == []

    # The session's node was not touched (ours, or kind's).
    session = node_cluster.stack
    if session is not None:
        assert network.is_up(session.config.network)
    for session_node in node_cluster.core.list_node().items:
        conditions = present(present(session_node.status, "status").conditions, "conditions")
        assert any(c.type == "Ready" and c.status == "True" for c in conditions)
