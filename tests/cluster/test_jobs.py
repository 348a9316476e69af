"""Jobs on the real control plane and the real node, where the product leans on
Kubernetes' own behaviour: the runner's exit code and termination message, which a failed
run's error quotes (`domain.pod_outcome`), and the runs namespace's pods quota, the hard
backstop behind the concurrency cap (the chart's ResourceQuota). Pods are containers of
the runner image (issue 39: these ran on the kubelet stand-in; its fidelity tests went
with it, and the real node's own are in test_real_node.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client, watch

from achilles_dev.images import RUNNER_IMAGE
from tests.cluster.conftest import Cluster
from tests.cluster.install.operator_support import ClaimGate
from tests.cluster.kube import (
    create_job,
    failed_job_state,
    final_state,
    job_condition,
    job_manifest,
    only_pod,
    present,
    python_command,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
# Three rounds of the Job controller's longest creation backoff (60 s), and slack.
COMPLETE_AFTER_REFUSALS = 240.0


def runner_image_job(name: str, command: list[str], **job_spec: Any) -> dict[str, Any]:
    """A Job of one container of the runner image (its python), running `command`."""
    container = {"image": RUNNER_IMAGE, "imagePullPolicy": "IfNotPresent"}
    container.update(job_spec.pop("container", {}))
    return job_manifest(name, command, container=container, **job_spec)


def held_until_open(gate: ClaimGate) -> list[str]:
    """A program that runs until `gate` (a TCP listener of the test) answers it, then exits."""
    host, port = gate.address.rsplit(":", 1)
    return python_command(f"import socket; socket.create_connection(({host!r}, {port})).recv(1)")


def test_failing_command_fails_the_job_with_its_exit_code(cluster: Cluster, namespace: str) -> None:
    command = python_command("import sys; print('cannot reach the model'); sys.exit(3)")
    manifest = runner_image_job(
        "fails", command, container={"terminationMessagePolicy": "FallbackToLogsOnError"}
    )
    create_job(cluster.batch, namespace, manifest)

    failed = wait_for(
        lambda: job_condition(cluster.batch, namespace, "fails", "Failed"), TIMEOUT, what="Failed"
    )
    assert failed.reason == "BackoffLimitExceeded"
    pod = only_pod(cluster.core, namespace, "fails")
    assert pod.status.phase == "Failed"
    state = final_state(pod)
    assert state["exitCode"] == 3
    assert state["reason"] == "Error"
    # The log's tail as the kubelet reads it, its newline too (the run's error clips it).
    assert state["message"] == "cannot reach the model\n"


def test_termination_message_file_is_reported(cluster: Cluster, namespace: str) -> None:
    command = python_command(
        "import sys; open('/dev/termination-log', 'w').write('run 42 failed: budget'); sys.exit(1)"
    )
    create_job(cluster.batch, namespace, runner_image_job("says-why", command))

    state = failed_job_state(cluster.batch, cluster.core, namespace, "says-why", TIMEOUT)
    assert (state["exitCode"], state["message"]) == (1, "run 42 failed: budget")


def test_pods_quota_keeps_running_pods_at_the_cap(cluster: Cluster, namespace: str) -> None:
    cap, completions = 2, 5
    gate = ClaimGate(cluster.host_address)
    gate.close()
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="pods"),
        spec=client.V1ResourceQuotaSpec(hard={"pods": str(cap)}),
    )
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(
        lambda: (
            (q := cluster.core.read_namespaced_resource_quota("pods", namespace)).status
            and q.status.used is not None
        ),
        TIMEOUT,
        what="the quota controller to count the namespace",
    )
    # Every change of every pod from here on, to find how many were ever active at once.
    listed = present(cluster.core.list_namespaced_pod(namespace).metadata, "the list's metadata")
    start_version = present(listed.resource_version, "the list's resourceVersion")
    peak = _PeakActivePods(cluster.core, namespace, start_version)
    try:
        create_job(
            cluster.batch,
            namespace,
            runner_image_job(
                "many", held_until_open(gate), parallelism=completions, completions=completions
            ),
        )

        # With the gate closed the pods keep running: the cap is reached, creation refused.
        wait_for(lambda: gate.waiting() == cap, TIMEOUT, what=f"{cap} pods held at the gate")
        wait_for(lambda: len(_running(cluster, namespace)) == cap, TIMEOUT, what="2 Running")
        wait_for(lambda: _quota_refusals(cluster, namespace), TIMEOUT, what="a quota refusal")
        assert len(cluster.core.list_namespaced_pod(namespace).items) == cap

        gate.open()  # the held pods end, and each later one at once
        # The Job controller retries a refused pod creation with backoff, 1 s doubling to
        # MaxJobApiBackOff (60 s, pkg/controller/job): by now a wait of 60 s, and a
        # creation that races the quota controller's recount is refused again. The 3
        # completions left at a cap of 2 take two rounds, so a minute and more each (a CI
        # run timed out at 120).
        wait_for(
            lambda: job_condition(cluster.batch, namespace, "many", "Complete"),
            COMPLETE_AFTER_REFUSALS,
            what="Complete",
        )
    finally:
        gate.stop()
    job = cluster.batch.read_namespaced_job("many", namespace)
    assert present(job.status, "the Job's status").succeeded == completions
    wait_for(
        lambda: len(peak.finished) == completions, TIMEOUT, what="the watch to see every pod end"
    )
    assert peak.stop() == cap


def _name(pod: client.V1Pod) -> str:
    return present(present(pod.metadata, "a pod's metadata").name, "a pod's name")


def _running(cluster: Cluster, namespace: str) -> list[str]:
    pods = cluster.core.list_namespaced_pod(namespace).items
    return [_name(p) for p in pods if present(p.status, "a pod's status").phase == "Running"]


def _quota_refusals(cluster: Cluster, namespace: str) -> list[str]:
    events = cluster.core.list_namespaced_event(namespace, field_selector="reason=FailedCreate")
    return [e.message for e in events.items if e.message and "exceeded quota" in e.message]


class _PeakActivePods:
    """Watches pods from a resourceVersion on; remembers the most ever non-terminal at once."""

    def __init__(self, core: client.CoreV1Api, namespace: str, resource_version: str) -> None:
        self._active: set[str] = set()
        self.finished: set[str] = set()
        self._peak = 0
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._observe, args=(core, namespace, resource_version), daemon=True
        )
        self._thread.start()

    def _observe(self, core: client.CoreV1Api, namespace: str, resource_version: str) -> None:
        stream = self._watch.stream(
            core.list_namespaced_pod, namespace, resource_version=resource_version
        )
        try:
            for event in stream:
                pod = event["object"]
                if event["type"] == "DELETED" or pod.status.phase in ("Succeeded", "Failed"):
                    self._active.discard(pod.metadata.name)
                    self.finished.add(pod.metadata.name)
                else:
                    self._active.add(pod.metadata.name)
                self._peak = max(self._peak, len(self._active))
        except Exception:
            if not self._stopped.is_set():  # only our own stop() may end the stream
                raise

    def stop(self) -> int:
        self._stopped.set()
        self._watch.stop()
        self._thread.join(timeout=10)
        return self._peak
