"""The run secret through a real kubelet (issue 37 item 2): the kubelet reads the run's
Secret as its node (the API server's Node authorizer), a pod whose Secret is missing
waits in the words `pod_from_json` tells apart (`waiting_for_run_secret`, what the
sweeper's repair looks for) and starts once the Secret is made. The pod checks the
secret it got against the hash the test gives it, the runner image's Python.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from achilles.domain.run_secret import RunSecret
from achilles.k8s.jobs import JobTemplate, RunJobs, RunJobSpec, SecretKey, build_run_job
from achilles.k8s.rest import request_json
from achilles.k8s.run_metadata import RUN_ID_LABEL, job_name
from achilles.k8s.run_observations import pod_from_json
from tests.cluster.conftest import NodeCluster
from tests.cluster.kube import job_condition
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

START_TIMEOUT = 120.0  # a pod's first start on a cold node unpacks the image

# Exit 0 only if the pod's ACHILLES_RUN_SECRET is the one whose SHA-256 the test expects.
CHECK = (
    "import hashlib, os, sys\n"
    "got = hashlib.sha256(os.environ['ACHILLES_RUN_SECRET'].encode()).hexdigest()\n"
    "sys.exit(0 if got == os.environ['EXPECTED_SHA256'] else 3)\n"
)


def _job(run_id: int, node_cluster: NodeCluster, namespace: str, secret: RunSecret) -> Any:
    template = JobTemplate(
        namespace=namespace,
        image=node_cluster.runner_image,
        database_secret=SecretKey("database", "url"),
        command=("python", "-c", CHECK),
        extra_env=(("EXPECTED_SHA256", secret.digest.hex()),),
    )
    spec = RunJobSpec(
        run_id=run_id,
        agent_id=1,
        agent_uid=None,
        agent_namespace=None,
        agent_name=None,
        trigger="manual",
        scheduled_for=None,
        run_timeout_seconds=300,
        model_secret=None,
        run_secret=secret,
    )
    return build_run_job(spec, template)


def _pod_json(node_cluster: NodeCluster, namespace: str, run_id: int) -> dict[str, Any] | None:
    pods = request_json(
        node_cluster.api,
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"label_selector": f"{RUN_ID_LABEL}={run_id}"},
    )["items"]
    return cast(dict[str, Any], pods[0]) if pods else None


def _complete(node_cluster: NodeCluster, namespace: str, run_id: int) -> bool:
    if job_condition(node_cluster.batch, namespace, job_name(run_id), "Failed"):
        raise AssertionError(f"Job {job_name(run_id)} failed: its pod got another secret")
    return bool(job_condition(node_cluster.batch, namespace, job_name(run_id), "Complete"))


def test_the_real_kubelet_waits_for_the_run_secret_then_reads_it(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    request_json(
        node_cluster.api,
        "POST",
        f"/api/v1/namespaces/{node_namespace}/secrets",
        body={"metadata": {"name": "database"}, "stringData": {"url": "unused"}},
    )
    jobs = RunJobs(node_cluster.api, node_namespace)

    # The dispatcher's two creates, one after the other.
    made = RunSecret.new()
    assert jobs.create(_job(1, node_cluster, node_namespace, made), made)

    # A Job whose dispatcher died before its Secret: the kubelet holds the pod, in words
    # the operator's pod observation recognises.
    late = RunSecret.new()
    node_cluster.batch.create_namespaced_job(
        node_namespace, cast(Any, _job(2, node_cluster, node_namespace, late))
    )

    def waiting() -> bool:
        pod = _pod_json(node_cluster, node_namespace, 2)
        observed = pod_from_json(pod) if pod else None
        return observed is not None and observed.waiting_for_run_secret

    wait_for(waiting, START_TIMEOUT, what="the kubelet to hold the pod for its run Secret")
    assert jobs.give_run_secret(2, late)
    assert not jobs.give_run_secret(2, RunSecret.new())  # there already: nothing replaced

    wait_for(
        lambda: (
            _complete(node_cluster, node_namespace, 1)
            and _complete(node_cluster, node_namespace, 2)
        ),
        START_TIMEOUT,
        what="both pods to read their secret and exit 0",
    )
