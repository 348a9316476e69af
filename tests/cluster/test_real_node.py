"""What only a real container runtime can show: the runner image's user, its read-only root
filesystem and missing service-account token, memory limits ending in OOMKilled, image
errors, a Job's deadline killing a hung container, and pods reaching the API server
through the `kubernetes` Service.

Plain Jobs and pods built here, shaped like the operator's run Jobs (restricted security
context, no token, an emptyDir /tmp); they run on the session's real node, or on any
cluster given by ACHILLES_TEST_KUBECONFIG (see conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import Any

import pytest

from tests.cluster.conftest import NodeCluster
from tests.cluster.kube import (
    create_job,
    create_pod,
    final_state,
    job_condition,
    job_pods,
    only_pod,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

START_TIMEOUT = 120.0  # a pod's first start on a cold node unpacks the image
RUNNER_UID = 10001

RESTRICTED_CONTAINER = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": RUNNER_UID,
    "runAsGroup": RUNNER_UID,
    "fsGroup": RUNNER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}

# What the process inside sees of itself, as one JSON line.
SELF_REPORT = """
import json, os, pathlib
def writable(directory):
    try:
        pathlib.Path(directory, "probe").write_text("x")
    except OSError as error:
        return error.strerror
    return True
status = dict(
    line.split(":", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines()
)
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "root": writable("/"), "app": writable("/usr/local/lib"), "tmp": writable("/tmp"),
    "token": os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount"),
    "caps": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "seccomp": status["Seccomp"].strip(),
}))
"""


def runner_job(
    name: str,
    image: str,
    code: str,
    *,
    resources: dict[str, Any] | None = None,
    pull_policy: str = "IfNotPresent",
    **job_spec: Any,
) -> dict[str, Any]:
    """A Job shaped like the operator's run Jobs, running `python -c code` in `image`."""
    container: dict[str, Any] = {
        "name": "runner",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["python", "-c", code],
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if resources:
        container["resources"] = resources
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            **job_spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": RESTRICTED_POD,
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
                }
            },
        },
    }


def completed_log(cluster: NodeCluster, namespace: str, job: str) -> str:
    wait_for(
        lambda: (
            job_condition(cluster.batch, namespace, job, "Complete")
            or _failed(cluster, namespace, job)
        ),
        START_TIMEOUT,
        what=f"Job {job} to finish",
    )
    pod = only_pod(cluster.core, namespace, job)
    log = str(cluster.core.read_namespaced_pod_log(pod.metadata.name, namespace))
    assert job_condition(cluster.batch, namespace, job, "Complete"), log
    return log


def _failed(cluster: NodeCluster, namespace: str, job: str) -> Any:
    condition = job_condition(cluster.batch, namespace, job, "Failed")
    if condition is not None:
        pod = only_pod(cluster.core, namespace, job)
        raise AssertionError(f"Job {job} failed: {condition.reason}; pod status {pod.status}")
    return None


def test_runner_image_runs_as_non_root_read_only_without_a_token(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    create_job(
        node_cluster.batch,
        node_namespace,
        runner_job("restricted", node_cluster.runner_image, SELF_REPORT),
    )
    seen = json.loads(completed_log(node_cluster, node_namespace, "restricted").splitlines()[-1])

    assert (seen["uid"], seen["gid"]) == (RUNNER_UID, RUNNER_UID)
    assert seen["root"] == seen["app"] == "Read-only file system"
    assert seen["tmp"] is True  # the pod's own emptyDir, writable by fsGroup
    assert seen["token"] is False
    assert int(seen["caps"], 16) == 0
    assert seen["no_new_privs"] == "1"
    assert seen["seccomp"] == "2"  # filter mode: the runtime's default profile


def test_runner_image_user_is_numeric_and_non_root(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    """Without runAsUser the kubelet must verify the image's own USER before starting it."""
    manifest = runner_job("image-user", node_cluster.runner_image, SELF_REPORT)
    pod_spec = manifest["spec"]["template"]["spec"]
    pod_spec["securityContext"] = {"runAsNonRoot": True}
    create_job(node_cluster.batch, node_namespace, manifest)
    seen = json.loads(completed_log(node_cluster, node_namespace, "image-user").splitlines()[-1])
    assert (seen["uid"], seen["gid"]) == (RUNNER_UID, 0)


def test_a_container_over_its_memory_limit_is_oom_killed(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    limits = {"memory": "64Mi", "cpu": "500m"}
    create_job(
        node_cluster.batch,
        node_namespace,
        runner_job("hog", node_cluster.runner_image, hog, resources={"limits": limits}),
    )
    failed = wait_for(
        lambda: job_condition(node_cluster.batch, node_namespace, "hog", "Failed"),
        START_TIMEOUT,
        what="the Job to fail",
    )
    assert failed.reason == "BackoffLimitExceeded"
    state = final_state(only_pod(node_cluster.core, node_namespace, "hog"))
    assert state["reason"] == "OOMKilled"
    assert state["exitCode"] == 137


def test_a_missing_image_surfaces_as_an_image_pull_error(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    image = "localhost/achilles/no-such-image:never"
    create_job(node_cluster.batch, node_namespace, runner_job("absent", image, "pass"))

    def waiting_reason() -> tuple[str, str] | None:
        pod = only_pod(node_cluster.core, node_namespace, "absent")
        for status in (pod.status.container_statuses if pod and pod.status else None) or []:
            waiting = status.state.waiting if status.state else None
            if waiting and waiting.reason in ("ErrImagePull", "ImagePullBackOff"):
                return str(waiting.reason), str(waiting.message)
        return None

    _, message = wait_for(waiting_reason, 60.0, what="ErrImagePull or ImagePullBackOff")
    assert image in message, message
    pod = only_pod(node_cluster.core, node_namespace, "absent")
    assert pod.status.phase == "Pending"


def test_active_deadline_kills_a_hanging_job(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    hang = "import time\nwhile True:\n    time.sleep(60)\n"
    manifest = runner_job("hangs", node_cluster.runner_image, hang, activeDeadlineSeconds=15)
    create_job(node_cluster.batch, node_namespace, manifest)
    wait_for(
        lambda: (
            (p := only_pod(node_cluster.core, node_namespace, "hangs"))
            and p.status.phase == "Running"
        ),
        START_TIMEOUT,
        what="the hanging pod to run",
    )

    failed = wait_for(
        lambda: job_condition(node_cluster.batch, node_namespace, "hangs", "Failed"),
        60.0,
        what="the Job to fail on its deadline",
    )
    assert failed.reason == "DeadlineExceeded"
    # The Job controller deletes the pod; the kubelet kills its container.
    wait_for(
        lambda: not job_pods(node_cluster.core, node_namespace, "hangs"),
        60.0,
        what="the hanging pod to be gone",
    )
    if node_cluster.stack is not None:
        node = node_cluster.stack.node()
        label = f"io.kubernetes.pod.namespace={node_namespace}"
        running = subprocess.run(
            node.crictl("ps", "--quiet", "--label", label),
            capture_output=True,
            text=True,
            check=True,
        )
        assert running.stdout.split() == []


def test_pods_reach_the_api_server_through_the_kubernetes_service(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    """In-cluster config: KUBERNETES_SERVICE_HOST (the Service IP, via kube-proxy), the
    mounted service-account token and CA; the API server says who the pod is."""
    who = (
        "from kubernetes import client, config\n"
        "config.load_incluster_config()\n"
        "review = client.AuthenticationV1Api().create_self_subject_review(\n"
        "    client.V1SelfSubjectReview())\n"
        "print(review.status.user_info.username)\n"
    )
    manifest = runner_job("who", node_cluster.runner_image, who)
    pod_spec = manifest["spec"]["template"]["spec"]
    pod_spec["automountServiceAccountToken"] = True
    pod_spec["enableServiceLinks"] = True
    create_job(node_cluster.batch, node_namespace, manifest)
    log = completed_log(node_cluster, node_namespace, "who")
    assert log.split()[-1] == f"system:serviceaccount:{node_namespace}:default"


def test_pod_ip_is_reachable_from_the_host(node_cluster: NodeCluster, node_namespace: str) -> None:
    if node_cluster.stack is None:
        pytest.skip("the host's route to pods is the local node's")
    serve = (
        "import http.server\n"
        "http.server.test(http.server.SimpleHTTPRequestHandler, port=8080, bind='0.0.0.0')\n"
    )
    pod = runner_job("serve", node_cluster.runner_image, serve)["spec"]["template"]
    pod["metadata"] = {"name": "serve"}
    pod["spec"]["containers"][0]["workingDir"] = "/tmp"
    create_pod(node_cluster.core, node_namespace, {"apiVersion": "v1", "kind": "Pod", **pod})

    def running_ip() -> str | None:
        status = node_cluster.core.read_namespaced_pod("serve", node_namespace).status
        return status.pod_ip if status and status.phase == "Running" else None

    ip = wait_for(running_ip, START_TIMEOUT, what="the server pod's IP")

    def answers() -> int | None:
        try:
            with urllib.request.urlopen(f"http://{ip}:8080/", timeout=2) as response:
                return int(response.status)
        except OSError:
            return None

    assert wait_for(answers, 30.0, what=f"http://{ip}:8080/ to answer") == 200
