"""The kubelet stand-in's own duties: environment resolution, configuration errors, and
surviving its own restart (adopting live processes, failing lost ones)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from achilles_dev.stack import LocalStack
from tests.cluster.conftest import Cluster
from tests.cluster.kube import (
    create_job,
    create_pod,
    failed_job_state,
    final_state,
    gated_program,
    job_condition,
    job_manifest,
    only_pod,
    pid_from,
    pod_phase,
    present,
    process_is_gone,
    python_command,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.standin("tests the stand-in itself")]

TIMEOUT = 60.0

_PRINT_ENV = (
    "import json, os, sys\n"
    "names = ['GREETING', 'WHO', 'TOKEN', 'MODEL', 'POD', 'NS', 'CFG_level']\n"
    "report = {n: os.environ.get(n) for n in names}\n"
    "report['argv'] = sys.argv[1:]\n"
    "open('/dev/termination-log', 'w').write(json.dumps(report))\n"
)


@pytest.fixture(scope="module")
def cluster(standin_cluster: Cluster) -> Cluster:
    """This module's cluster: the kubelet stand-in's stack, not the session's real node."""
    return standin_cluster


def _stack(cluster: Cluster) -> LocalStack:
    assert cluster.stack is not None, "the stand-in's cluster has its stack"
    return cluster.stack


def _pod(
    name: str, command: list[str], env: Sequence[Mapping[str, object]], **container: object
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "ignored", "command": command, "env": env, **container}
            ],
        },
    }


def _secret(cluster: Cluster, namespace: str, name: str, data: dict[str, str]) -> None:
    cluster.core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
    )


def test_pod_environment_is_resolved_like_the_kubelet(cluster: Cluster, namespace: str) -> None:
    _secret(cluster, namespace, "llm", {"token": "s3cret"})
    cluster.core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="settings"), data={"model": "tiny", "level": "debug"}
        ),
    )
    env: list[dict[str, object]] = [
        {"name": "WHO", "value": "agents"},
        {"name": "GREETING", "value": "hello $(WHO), $$(WHO) stays"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "token"}}},
        {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "model"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    manifest = _pod(
        "env-check",
        [*python_command(_PRINT_ENV), "$(MODEL)"],
        env,
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
    )
    create_pod(cluster.core, namespace, manifest)

    wait_for(
        lambda: pod_phase(cluster.core, namespace, "env-check") == "Succeeded",
        TIMEOUT,
        what="Succeeded",
    )
    pod = cluster.core.read_namespaced_pod("env-check", namespace)
    report = json.loads(final_state(pod)["message"])
    assert report == {
        "GREETING": "hello agents, $(WHO) stays",
        "WHO": "agents",
        "TOKEN": "s3cret",
        "MODEL": "tiny",
        "POD": "env-check",
        "NS": namespace,
        "CFG_level": "debug",
        "argv": ["tiny"],
    }


def test_missing_secret_holds_the_pod_until_it_exists(cluster: Cluster, namespace: str) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    create_pod(cluster.core, namespace, _pod("waits", python_command("pass"), env))

    def waiting_reason() -> str | None:
        pod = cluster.core.read_namespaced_pod("waits", namespace)
        statuses = present(pod.status, "the pod's status").container_statuses or []
        state = statuses[0].state if statuses else None
        return state.waiting.reason if state and state.waiting else None

    wait_for(lambda: waiting_reason() == "CreateContainerConfigError", TIMEOUT, what="config error")
    assert pod_phase(cluster.core, namespace, "waits") == "Pending"

    _secret(cluster, namespace, "later", {"token": "now"})
    wait_for(
        lambda: pod_phase(cluster.core, namespace, "waits") == "Succeeded",
        TIMEOUT,
        what="Succeeded",
    )


def test_restarted_standin_adopts_a_running_process(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pid_file, gate = tmp_path / "pid", tmp_path / "gate"
    create_job(
        cluster.batch,
        namespace,
        job_manifest("survivor", gated_program(pid_file, gate, exit_code=7)),
    )
    pid = wait_for(lambda: pid_from(pid_file), TIMEOUT, what="the pod's process to start")

    _stack(cluster).stop_component("kubelet")
    assert not process_is_gone(pid), "stopping the stand-in must not stop its pods"
    gate.touch()  # the process ends while no stand-in watches it
    wait_for(lambda: process_is_gone(pid), TIMEOUT, what="the process to finish")
    _stack(cluster).up()

    state = failed_job_state(cluster.batch, cluster.core, namespace, "survivor", TIMEOUT)
    assert (state["exitCode"], state["reason"]) == (7, "Error")


def test_process_lost_while_standin_was_down_fails_its_pod(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    create_job(
        cluster.batch, namespace, job_manifest("lost", gated_program(pid_file, tmp_path / "never"))
    )
    pid = wait_for(lambda: pid_from(pid_file), TIMEOUT, what="the pod's process to start")
    pod = wait_for(
        lambda: (
            (p := only_pod(cluster.core, namespace, "lost")) and p.status.phase == "Running" and p
        ),
        TIMEOUT,
        what="Running reported",
    )
    shim_pid = int(pod.status.container_statuses[0].container_id.removeprefix("achilles://"))

    _stack(cluster).stop_component("kubelet")
    os.killpg(shim_pid, signal.SIGKILL)  # shim and process vanish without a word
    wait_for(lambda: process_is_gone(pid), TIMEOUT, what="the process to die")
    _stack(cluster).up()

    state = failed_job_state(cluster.batch, cluster.core, namespace, "lost", TIMEOUT)
    assert (state["exitCode"], state["reason"]) == (137, "ContainerStatusUnknown")


def test_pod_logs_are_served_through_the_api_server(cluster: Cluster, namespace: str) -> None:
    command = python_command("print('first'); print('second'); print('third')")
    create_job(cluster.batch, namespace, job_manifest("talks", command))
    wait_for(
        lambda: job_condition(cluster.batch, namespace, "talks", "Complete"),
        TIMEOUT,
        what="Complete",
    )
    name = only_pod(cluster.core, namespace, "talks").metadata.name

    # The same path as `kubectl logs`: API server -> the stand-in's HTTPS endpoint.
    assert cluster.core.read_namespaced_pod_log(name, namespace) == "first\nsecond\nthird\n"
    assert cluster.core.read_namespaced_pod_log(name, namespace, tail_lines=1) == "third\n"


def test_on_failure_restarts_the_process_until_it_succeeds(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    marker = tmp_path / "tried"
    program = python_command(
        "import pathlib, sys\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if marker.exists():\n"
        "    sys.exit(0)\n"
        "marker.touch()\n"
        "sys.exit(1)\n"
    )
    manifest = _pod("retries", program, [])
    manifest["spec"]["restartPolicy"] = "OnFailure"
    create_pod(cluster.core, namespace, manifest)

    # The first restart waits out the kubelet's initial back-off of 10 s.
    wait_for(
        lambda: pod_phase(cluster.core, namespace, "retries") == "Succeeded",
        TIMEOUT,
        what="Succeeded",
    )
    pod = cluster.core.read_namespaced_pod("retries", namespace)
    statuses = present(present(pod.status, "the pod's status").container_statuses, "statuses")
    assert statuses[0].restart_count == 1
    last = present(statuses[0].last_state, "the container's last state")
    assert present(last.terminated, "the first run's end").exit_code == 1
    now = present(statuses[0].state, "the container's state")
    assert present(now.terminated, "the second run's end").exit_code == 0
