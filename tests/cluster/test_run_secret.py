"""The run secret reaches only its run's pod (issue 37 item 2), on the real API server,
its authorizers (RBAC, Node) and the controller manager's garbage collector.

The dispatcher acts as a user bound to the chart's own Role for the operator in the
runs namespace (rendered by helm), so these also prove that Role suffices: it creates
the Job and the run's Secret, reads no Secret. A user bound to the built-in `view`
ClusterRole reads the Job and the pod, and no secret in them, and may not read the
Secret; the API server's Node authorizer lets only the node the run's pod is bound to
read it. The pod (the runner image on the real node, running the tests' slow runner)
reads the secret from the Secret and claims its run with it as the runner's login; the
Secret goes with its Job.
A Job whose dispatcher died before making its Secret gets one from the sweeper's
pending-pods pass, and its pod then claims.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal import runs as journal
from achilles.db.roles import Component
from achilles.domain.pod_outcome import RUN_SECRET_GRACE
from achilles.domain.run_secret import RUN_SECRET_ENV, RunSecret
from achilles.domain.runs import RunTrigger
from achilles.k8s.client import api_client
from achilles.k8s.jobs import JobTemplate, RunJobs, RunJobSpec, SecretKey, build_run_job
from achilles.k8s.rest import request_json
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUN_SECRET_KEY, job_name, run_secret_name
from achilles.services.dispatch import dispatch_queued_runs
from achilles.services.run_objects import RunObjects
from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE
from achilles_dev.images import RUNNER_IMAGE
from achilles_dev.logins import with_login
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import Cluster
from tests.db.factories import make_agent
from tests.db.logins import login_url
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
START_TIMEOUT = 120.0  # a pod's first start on a cold node unpacks the image
SLOW_RUNNER = Path(__file__).parent / "install" / "slow_runner.py"
RUNNER_DATABASE_SECRET = "runner-database"
VIEWER = "a-viewer"


def _impersonating(cluster: Cluster, user: str) -> client.ApiClient:
    api = api_client(cluster.kubeconfig)
    api.default_headers["Impersonate-User"] = user
    return api


def _chart_runs_role_rules() -> list[dict[str, Any]]:
    """The rules of the chart's Role for the operator in the runs namespace."""
    rendered = subprocess.run(
        [str(bin_dir() / "helm"), "template", RELEASE, str(CHART_DIR),
         "--namespace", RELEASE_NAMESPACE],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (role,) = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] == "Role" and doc["metadata"]["name"].endswith("-operator-runs")
    ]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


RBAC = "/apis/rbac.authorization.k8s.io/v1"
REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _post(cluster: Cluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = request_json(cluster.api, "POST", path, body=body)
    return answer


def _bind(cluster: Cluster, namespace: str, user: str, role_kind: str, role: str) -> None:
    binding = {
        "metadata": {"name": f"{user}-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    _post(cluster, f"{RBAC}/namespaces/{namespace}/rolebindings", binding)


def _may(cluster: Cluster, user: str, groups: list[str], namespace: str, name: str) -> bool:
    """The API server's answer (every authorizer: Node, RBAC) to `user` getting the Secret."""
    attributes = {"namespace": namespace, "verb": "get", "resource": "secrets", "name": name}
    spec = {"user": user, "groups": groups, "resourceAttributes": attributes}
    return bool(_post(cluster, REVIEWS, {"spec": spec})["status"].get("allowed"))


def _until_rbac_admits(cluster: Cluster, namespace: str, user: str, verb: str) -> None:
    """RBAC's cache takes a new binding within a moment: wait until it lets `user` `verb`
    Jobs in the namespace."""
    attributes = {"namespace": namespace, "verb": verb, "resource": "jobs", "group": "batch"}

    def allowed() -> bool:
        spec = {"user": user, "resourceAttributes": attributes}
        return bool(_post(cluster, REVIEWS, {"spec": spec})["status"].get("allowed"))

    wait_for(allowed, TIMEOUT, what=f"RBAC to admit {user}'s binding")


@pytest.fixture
def operator_api(cluster: Cluster, namespace: str) -> Iterator[client.ApiClient]:
    """A client that acts as a user holding exactly the chart's runs-namespace Role."""
    user = f"achilles-operator-{uuid.uuid4().hex[:6]}"
    role = {"metadata": {"name": "operator-runs"}, "rules": _chart_runs_role_rules()}
    _post(cluster, f"{RBAC}/namespaces/{namespace}/roles", role)
    _bind(cluster, namespace, user, "Role", "operator-runs")
    _until_rbac_admits(cluster, namespace, user, "create")
    with _impersonating(cluster, user) as api:
        yield api


def _template(namespace: str) -> JobTemplate:
    return JobTemplate(
        namespace=namespace,
        image=RUNNER_IMAGE,
        database_secret=SecretKey(RUNNER_DATABASE_SECRET, "url"),
        command=("python", "-c", SLOW_RUNNER.read_text()),
        extra_env=(("ACHILLES_TEST_HOLD_SECONDS", "0"),),
    )


def _runner_database(cluster: Cluster, namespace: str, database_url: str) -> None:
    secret = {
        "metadata": {"name": RUNNER_DATABASE_SECRET},
        # The runner's login, where the cluster's pods reach the tier's PostgreSQL.
        "stringData": {
            "url": with_login(login_url(database_url, Component.RUNNER), host=cluster.host_address)
        },
    }
    _post(cluster, f"/api/v1/namespaces/{namespace}/secrets", secret)


def _enqueue(db: Engine) -> int:
    with Session(db) as session, session.begin():
        return journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id


def _row(db: Engine, run_id: int) -> Any:
    with db.connect() as conn:
        return conn.execute(
            text("SELECT state, runner_secret_hash FROM agent_runs WHERE id = :r"), {"r": run_id}
        ).one()


def _succeeded(db: Engine, run_id: int) -> bool:
    return bool(_row(db, run_id).state == "succeeded")


def _secret_value(cluster: Cluster, namespace: str, run_id: int) -> str:
    """The run Secret's value, read as the cluster's admin."""
    secret = _secret(cluster, namespace, run_id)
    return base64.b64decode(secret["data"][RUN_SECRET_KEY]).decode()


def _secret(cluster: Cluster, namespace: str, run_id: int) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{namespace}/secrets/{run_secret_name(run_id)}"
    secret: dict[str, Any] = request_json(cluster.api, "GET", path)
    return secret


def test_the_run_secret_reaches_its_pod_only_and_goes_with_its_job(
    cluster: Cluster,
    namespace: str,
    database_url: str,
    db: Engine,
    operator_api: client.ApiClient,
) -> None:
    _runner_database(cluster, namespace, database_url)
    _bind(cluster, namespace, VIEWER, "ClusterRole", "view")
    run_id = _enqueue(db)
    jobs = RunJobs(operator_api, namespace)
    operator = Database(login_url(database_url, Component.OPERATOR), pool_size=2)
    try:
        done = dispatch_queued_runs(operator, jobs, _template(namespace))
    finally:
        operator.dispose()
    assert [run.run_id for run in done.created] == [run_id], done.rejected
    wait_for(
        lambda: _succeeded(db, run_id), START_TIMEOUT, what="the run's pod to claim and succeed"
    )

    # The pod read the Secret's value and claimed with it: the row holds its hash.
    value = _secret_value(cluster, namespace, run_id)
    assert _row(db, run_id).runner_secret_hash == hashlib.sha256(value.encode()).digest()

    # A reader of the namespace (`view`) reads the Job and the pod, and no secret in them.
    _until_rbac_admits(cluster, namespace, VIEWER, "get")
    with _impersonating(cluster, VIEWER) as viewer:
        job = request_json(
            viewer, "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job_name(run_id)}"
        )
        pods = request_json(
            viewer,
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"label_selector": f"{RUN_ID_LABEL}={run_id}"},
        )["items"]
        assert len(pods) == 1
        for document in (job, pods[0]):
            assert value not in json.dumps(document)
        (container,) = pods[0]["spec"]["containers"]
        (variable,) = [v for v in container["env"] if v["name"] == RUN_SECRET_ENV]
        assert variable == {
            "name": RUN_SECRET_ENV,
            "valueFrom": {"secretKeyRef": {"name": run_secret_name(run_id), "key": "run-secret"}},
        }
        core = client.CoreV1Api(viewer)
        with pytest.raises(ApiException) as refused:
            core.read_namespaced_secret(run_secret_name(run_id), namespace)
        assert refused.value.status == 403
        with pytest.raises(ApiException) as refused:
            core.list_namespaced_secret(namespace)
        assert refused.value.status == 403
    # Nor do the namespace's Events.
    events = request_json(cluster.api, "GET", f"/api/v1/namespaces/{namespace}/events")
    assert events["items"], "no Events at all: the check below would prove nothing"
    assert value not in json.dumps(events)

    # Who else may read it, by the API server's own authorizers: the node the run's pod
    # is bound to (the Node authorizer: a Secret its pod refers to), no other node, not
    # the pod's ServiceAccount (it has no token anyway), not the operator.
    name = run_secret_name(run_id)
    node = pods[0]["spec"]["nodeName"]
    assert _may(cluster, f"system:node:{node}", ["system:nodes"], namespace, name)
    assert not _may(cluster, "system:node:another-node", ["system:nodes"], namespace, name)
    account = f"system:serviceaccount:{namespace}:default"
    assert not _may(cluster, account, ["system:serviceaccounts"], namespace, name)
    assert not _may(cluster, operator_api.default_headers["Impersonate-User"], [], namespace, name)
    assert not _may(cluster, VIEWER, [], namespace, name)

    # Owned by its Job: the garbage collector deletes it with the Job.
    (owner,) = _secret(cluster, namespace, run_id)["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Job", job_name(run_id))
    assert owner["uid"] == job["metadata"]["uid"]
    assert jobs.delete(run_id)

    def gone() -> bool:
        try:
            _secret(cluster, namespace, run_id)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for(gone, TIMEOUT, what="the garbage collector to delete the run's Secret")


def test_a_job_whose_secret_never_came_gets_one_and_its_pod_claims(
    cluster: Cluster,
    namespace: str,
    database_url: str,
    db: Engine,
    operator_api: client.ApiClient,
) -> None:
    """The dispatcher died between the Job and its Secret: the pod waits
    (CreateContainerConfigError, as the pod watcher reads it from the real pod), and
    the pending-pods pass past RUN_SECRET_GRACE makes the Secret, the row first."""
    _runner_database(cluster, namespace, database_url)
    run_id = _enqueue(db)
    lost = RunSecret.new()  # the dead dispatcher's: in its Job's hash only
    with Session(db) as session, session.begin():
        queue.mark_dispatched(session, {run_id: lost.digest}, datetime.now(UTC))
    spec = RunJobSpec(
        run_id=run_id,
        agent_id=1,
        agent_uid=None,
        agent_namespace=None,
        agent_name=None,
        trigger="manual",
        scheduled_for=None,
        run_timeout_seconds=120,
        model_secret=None,
        run_secret=lost,
    )
    cluster.batch.create_namespaced_job(
        namespace, cast(Any, build_run_job(spec, _template(namespace)))
    )

    operator = Database(login_url(database_url, Component.OPERATOR), pool_size=2)
    objects = RunObjects(operator, RunJobs(operator_api, namespace), watch_timeout_seconds=1)
    stop = threading.Event()
    try:

        def waiting() -> bool:
            objects.follow_pods(stop, lambda failed: None)
            return any(pod.waiting_for_run_secret for pod in objects.pending_pods() or [])

        wait_for(waiting, START_TIMEOUT, what="the pod to wait for its run Secret")
        assert objects.judge_pending_pods() == []  # within the grace: nothing made
        assert _row(db, run_id).runner_secret_hash == lost.digest

        seconds = RUN_SECRET_GRACE.total_seconds() + 1
        with db.begin() as conn:
            conn.execute(
                text(
                    "UPDATE agent_runs SET dispatched_at ="
                    f" now() - interval '{seconds} seconds' WHERE id = :r"
                ),
                {"r": run_id},
            )
        assert objects.judge_pending_pods() == []  # no run failed; its Secret made
        wait_for(lambda: _succeeded(db, run_id), START_TIMEOUT, what="the pod to claim and succeed")
    finally:
        operator.dispose()
    value = _secret_value(cluster, namespace, run_id)
    assert _row(db, run_id).runner_secret_hash == hashlib.sha256(value.encode()).digest()
    assert hashlib.sha256(value.encode()).digest() != lost.digest
