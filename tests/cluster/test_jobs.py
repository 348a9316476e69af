"""Jobs on the real control plane: the real Job controller, quota and deletion, with the
kubelet stand-in running each pod's command as a local process: the stand-in's fidelity
to a kubelet, which goes with it (issue 39; the real node's own: test_real_node.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kubernetes import client, watch

from achilles_dev.stack import LocalStack
from tests.cluster.conftest import Cluster
from tests.cluster.kube import (
    create_job,
    failed_job_state,
    final_state,
    gated_program,
    job_condition,
    job_manifest,
    only_pod,
    pid_from,
    present,
    process_is_gone,
    python_command,
)
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.standin(
        "its pods are the stand-in's host processes (images ignored): the tests read their "
        "pids and gate them with files on this machine"
    ),
]

TIMEOUT = 60.0
# Three rounds of the Job controller's longest creation backoff (60 s), and slack.
COMPLETE_AFTER_REFUSALS = 240.0


@pytest.fixture(scope="module")
def cluster(standin_cluster: Cluster) -> Cluster:
    """This module's cluster: the kubelet stand-in's stack, not the session's real node."""
    return standin_cluster


def _stack(cluster: Cluster) -> LocalStack:
    assert cluster.stack is not None, "the stand-in's cluster has its stack"
    return cluster.stack


def test_python_job_goes_pending_running_complete(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pid_file, gate = tmp_path / "pid", tmp_path / "gate"
    create_job(cluster.batch, namespace, job_manifest("hello", gated_program(pid_file, gate)))

    pod = wait_for(
        lambda: (
            (p := only_pod(cluster.core, namespace, "hello")) and p.status.phase == "Running" and p
        ),
        TIMEOUT,
        what="the Job's pod to run",
    )
    assert pod.spec.node_name == _stack(cluster).config.node_name
    assert pod.status.container_statuses[0].ready is True
    pid = wait_for(lambda: pid_from(pid_file), TIMEOUT, what="the pod's process to start")
    assert not process_is_gone(pid)

    gate.touch()
    wait_for(
        lambda: job_condition(cluster.batch, namespace, "hello", "Complete"),
        TIMEOUT,
        what="Complete",
    )
    job = cluster.batch.read_namespaced_job("hello", namespace)
    status = present(job.status, "the Job's status")
    assert (status.succeeded, status.failed) == (1, None)
    pod = only_pod(cluster.core, namespace, "hello")
    assert pod.status.phase == "Succeeded"
    assert final_state(pod)["exitCode"] == 0
    assert final_state(pod)["reason"] == "Completed"
    # The Job controller counted the pod and released it.
    assert "batch.kubernetes.io/job-tracking" not in (pod.metadata.finalizers or [])


def test_failing_command_fails_the_job_with_its_exit_code(cluster: Cluster, namespace: str) -> None:
    command = python_command("import sys; print('cannot reach the model'); sys.exit(3)")
    manifest = job_manifest(
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
    assert state["message"] == "cannot reach the model"


def test_termination_message_file_is_reported(cluster: Cluster, namespace: str) -> None:
    command = python_command(
        "import sys; open('/dev/termination-log', 'w').write('run 42 failed: budget'); sys.exit(1)"
    )
    create_job(cluster.batch, namespace, job_manifest("says-why", command))

    state = failed_job_state(cluster.batch, cluster.core, namespace, "says-why", TIMEOUT)
    assert (state["exitCode"], state["message"]) == (1, "run 42 failed: budget")


def test_deleting_a_running_job_kills_its_process(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    create_job(
        cluster.batch,
        namespace,
        job_manifest("doomed", gated_program(pid_file, tmp_path / "never")),
    )
    pid = wait_for(lambda: pid_from(pid_file), TIMEOUT, what="the pod's process to start")
    pod_name = only_pod(cluster.core, namespace, "doomed").metadata.name

    cluster.batch.delete_namespaced_job("doomed", namespace, propagation_policy="Background")

    wait_for(lambda: process_is_gone(pid), TIMEOUT, what=f"process {pid} to be killed")
    wait_for(
        lambda: pod_name not in _pod_names(cluster, namespace), TIMEOUT, what="the pod to be gone"
    )


def test_active_deadline_kills_a_long_process(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    manifest = job_manifest(
        "slow", gated_program(pid_file, tmp_path / "never"), activeDeadlineSeconds=2
    )
    create_job(cluster.batch, namespace, manifest)
    pid = wait_for(lambda: pid_from(pid_file), TIMEOUT, what="the pod's process to start")

    failed = wait_for(
        lambda: job_condition(cluster.batch, namespace, "slow", "Failed"), TIMEOUT, what="Failed"
    )
    assert failed.reason == "DeadlineExceeded"
    wait_for(lambda: process_is_gone(pid), TIMEOUT, what=f"process {pid} to be killed")


def test_pods_quota_keeps_running_pods_at_the_cap(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    cap, completions, gate = 2, 5, tmp_path / "gate"
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
    create_job(
        cluster.batch,
        namespace,
        job_manifest(
            "many", gated_program(None, gate), parallelism=completions, completions=completions
        ),
    )

    # With the gate closed the pods keep running: the cap is reached and creation refused.
    wait_for(lambda: len(_running(cluster, namespace)) == cap, TIMEOUT, what=f"{cap} running pods")
    wait_for(lambda: _quota_refusals(cluster, namespace), TIMEOUT, what="a quota refusal")
    assert len(cluster.core.list_namespaced_pod(namespace).items) == cap

    gate.touch()
    # The Job controller retries a refused pod creation with backoff, 1 s doubling to
    # MaxJobApiBackOff (60 s, pkg/controller/job): by now a wait of 60 s, and a creation
    # that races the quota controller's recount is refused again. The 3 completions left
    # at a cap of 2 take two rounds, so a minute and more each (a CI run timed out at 120).
    wait_for(
        lambda: job_condition(cluster.batch, namespace, "many", "Complete"),
        COMPLETE_AFTER_REFUSALS,
        what="Complete",
    )
    job = cluster.batch.read_namespaced_job("many", namespace)
    assert present(job.status, "the Job's status").succeeded == completions
    wait_for(
        lambda: len(peak.finished) == completions, TIMEOUT, what="the watch to see every pod end"
    )
    assert peak.stop() == cap


def _name(pod: client.V1Pod) -> str:
    return present(present(pod.metadata, "a pod's metadata").name, "a pod's name")


def _pod_names(cluster: Cluster, namespace: str) -> set[str]:
    return {_name(p) for p in cluster.core.list_namespaced_pod(namespace).items}


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
