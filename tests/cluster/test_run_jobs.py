"""The dispatcher's Job calls (`RunJobs.create`, `run_secret_digest`) on the real API server.

The dispatcher decides from their answers what a run's mark becomes
(services/dispatch.py): made, made before (409: the Job's secret is adopted), refused
for sure (undone), or maybe made (kept for the sweeper). The create does not parse the
answer's Job, so these prove the calls still tell those apart."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from achilles.domain.run_secret import RunSecret
from achilles.k8s import jobs as jobs_module
from achilles.k8s import rest
from achilles.k8s.client import api_client
from achilles.k8s.jobs import (
    JobRejected,
    JobTemplate,
    RunJobs,
    RunJobSpec,
    SecretKey,
    build_run_job,
)
from achilles.k8s.run_metadata import job_name
from tests.cluster.conftest import Cluster
from tests.dead_cluster import write_kubeconfig
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0


def _job(run_id: int, namespace: str, secret: RunSecret, agent_id: int = 1) -> dict[str, object]:
    # `true` ignores its arguments: the pod ends at once, touching nothing.
    template = JobTemplate(
        namespace=namespace,
        image="achilles:test",
        database_secret=SecretKey("db", "url"),
        command=("true",),
    )
    spec = RunJobSpec(
        run_id=run_id,
        agent_id=agent_id,
        agent_uid=None,
        agent_namespace=None,
        agent_name=None,
        trigger="manual",
        scheduled_for=datetime.now(UTC),
        run_timeout_seconds=60,
        model_secret=None,
        run_secret=secret,
    )
    return build_run_job(spec, template)


def test_a_create_says_made_then_made_before_and_the_job_keeps_its_first_secret(
    cluster: Cluster, namespace: str
) -> None:
    jobs = RunJobs(cluster.api, namespace)
    first, second = RunSecret.new(), RunSecret.new()
    assert jobs.create(_job(7, namespace, first), first) is True
    assert cluster.batch.read_namespaced_job(job_name(7), namespace).metadata is not None
    assert jobs.create(_job(7, namespace, second), second) is False  # 409: an earlier one
    assert jobs.run_secret_digest(7) == first.digest
    assert jobs.run_secret_digest(8) is None


def test_the_jobs_of_gone_agents_are_deleted_and_no_other(
    cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two agents per list and a page of one Job: the batches and the pages both show.
    monkeypatch.setattr(jobs_module, "AGENTS_PER_LIST", 2)
    monkeypatch.setattr(rest, "METADATA_PAGE", 1)
    jobs = RunJobs(cluster.api, namespace)
    owners = {21: 1, 22: 1, 23: 2, 24: 3, 25: 4}  # run id -> agent id
    for run_id, agent_id in owners.items():
        secret = RunSecret.new()
        assert jobs.create(_job(run_id, namespace, secret, agent_id=agent_id), secret)

    assert jobs.delete_for_agents([3, 1, 2, 99]) == 4
    assert jobs.delete_for_agents([]) == 0

    def left() -> set[str] | None:
        found = cluster.batch.list_namespaced_job(namespace).items
        names = {job.metadata.name for job in found if job.metadata and job.metadata.name}
        gone = not any(job.metadata and job.metadata.deletion_timestamp for job in found)
        return names if gone and len(names) == 1 else None

    assert wait_for(left, TIMEOUT, what="the gone agents' Jobs deleted") == {job_name(25)}


def test_a_quota_refusal_is_a_refusal_for_sure(cluster: Cluster, namespace: str) -> None:
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-jobs"),
        spec=client.V1ResourceQuotaSpec(hard={"count/jobs.batch": "0"}),
    )
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(
        lambda: (
            (q := cluster.core.read_namespaced_resource_quota("no-jobs", namespace)).status
            and q.status.used is not None
        ),
        TIMEOUT,
        what="the quota controller to count the namespace",
    )
    secret = RunSecret.new()
    with pytest.raises(JobRejected) as refused:
        RunJobs(cluster.api, namespace).create(_job(9, namespace, secret), secret)
    assert refused.value.status == 403
    assert "exceeded quota" in str(refused.value)
    assert refused.value.maybe_created is False  # the dispatcher undoes the run's mark


def test_an_api_server_nobody_serves_is_a_refusal_for_sure(tmp_path: Path) -> None:
    """No connection was made, so no Job can appear later: the mark is undone."""
    api = api_client(write_kubeconfig(tmp_path / "dead"))
    secret = RunSecret.new()
    with api, pytest.raises(JobRejected) as refused:
        RunJobs(api, "achilles-runs").create(_job(1, "achilles-runs", secret), secret)
    assert refused.value.status is None
    assert refused.value.maybe_created is False


def test_a_refused_run_secret_takes_its_job_back(cluster: Cluster, namespace: str) -> None:
    """The Job is made, its run Secret refused for sure (a quota of no Secrets): the Job
    is deleted and the refusal raised as sure, so the dispatcher undoes the run's mark
    and nothing is left waiting for a Secret that will not come (issue 37 item 2)."""
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-secrets"),
        spec=client.V1ResourceQuotaSpec(hard={"count/secrets": "0"}),
    )
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(
        lambda: (
            (q := cluster.core.read_namespaced_resource_quota("no-secrets", namespace)).status
            and q.status.used is not None
        ),
        TIMEOUT,
        what="the quota controller to count the namespace",
    )
    secret = RunSecret.new()
    with pytest.raises(JobRejected) as refused:
        RunJobs(cluster.api, namespace).create(_job(11, namespace, secret), secret)
    assert refused.value.status == 403
    assert "exceeded quota" in str(refused.value)
    assert refused.value.maybe_created is False

    def job_gone() -> bool:
        try:
            cluster.batch.read_namespaced_job(job_name(11), namespace)
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for(job_gone, TIMEOUT, what="the Job whose Secret was refused to be deleted")
