"""The run watchers' list-then-watch on the real API server (k8s/watching.py,
services/run_objects.py; issue 20): a watch that ends resumes from its resourceVersion
without sending the objects again, the view the sweeper reads follows Jobs created and
deleted, and a real pod's exit is folded once. Each test's watches are made to end after
a second (`timeout_seconds`), as every watch ends after its timeout.

Not here: a 410 Gone. This API server (v1.37, its watch cache) could not be made to
refuse what it had forgotten: a watch from resourceVersion "1", before or after
compacting etcd's history, replayed the namespace's history; a listing's continue token
was still served after a compaction. So `ListWatch`'s 410 paths (forget the version,
list again) are not run against a real server."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.pod_outcome import JobObservation
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import RunJobs
from achilles.k8s.run_metadata import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    RUNNER_CONTAINER,
    job_name,
)
from achilles.k8s.run_watch import job_watch
from achilles.k8s.watching import Change, Page
from achilles.services.outcomes import FailedRun
from achilles.services.run_objects import RunObjects
from achilles_dev.images import RUNNER_IMAGE
from tests.cluster.conftest import Cluster
from tests.cluster.kube import create_job, python_command
from tests.db.factories import make_agent
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
RUNS_UNTIL_TERMINATED = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "while True: time.sleep(1)\n"
)


def _run_job(run_id: int, command: list[str] | None = None) -> dict[str, Any]:
    """A run Job as the operator labels it; without a command it stays suspended (no pod)."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: str(run_id)}
    container = {
        "name": RUNNER_CONTAINER,
        "image": RUNNER_IMAGE,  # its python, on the real node
        "command": command or ["true"],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(run_id), "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "suspend": command is None,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def _create(jobs: RunJobs, run_id: int, command: list[str] | None = None) -> None:
    create_job(client.BatchV1Api(jobs.api), jobs.namespace, _run_job(run_id, command))


def _delete(jobs: RunJobs, run_id: int) -> None:
    assert jobs.delete(run_id)


def _unlabelled(jobs: RunJobs, name: str) -> None:
    """A Job in the namespace that is not the operator's: the server's selector drops it."""
    manifest = _run_job(999_999)
    manifest["metadata"] = {"name": name}
    manifest["spec"]["template"]["metadata"] = {}
    create_job(client.BatchV1Api(jobs.api), jobs.namespace, manifest)


def _one_pass(stream: Any) -> list[Page[JobObservation] | Change[JobObservation]]:
    return list(stream)


def test_a_watch_that_ends_resumes_without_sending_the_objects_again(
    cluster: Cluster, namespace: str
) -> None:
    jobs = RunJobs(cluster.api, namespace)
    for run_id in (1, 2, 3):
        _create(jobs, run_id)
    _unlabelled(jobs, "not-ours")
    watch = job_watch(jobs, timeout_seconds=1)
    watch.page_size = 2  # three Jobs: two pages

    first = _one_pass(watch.follow())
    pages = [item for item in first if isinstance(item, Page)]
    assert [(page.first, page.last) for page in pages] == [(True, False), (False, True)]
    assert sorted(job.run_id for page in pages for job in page.items) == [1, 2, 3]
    assert watch.resource_version is not None

    _create(jobs, 4)
    seen: list[Change[JobObservation]] = []

    def four_added() -> bool:
        """One more pass (a second long); the Job controller may still touch the first
        Jobs (MODIFIED), Job 4 comes ADDED."""
        again = _one_pass(watch.follow())
        assert not any(isinstance(item, Page) for item in again), "a resumed watch listed"
        seen.extend(item for item in again if isinstance(item, Change))
        return any(change.type == "ADDED" and change.item.run_id == 4 for change in seen)

    wait_for(four_added, TIMEOUT, what="Job 4 to come as ADDED")
    added = [change.item.run_id for change in seen if change.type == "ADDED"]
    assert added == [4]  # nothing already known comes again as ADDED
    assert (watch.counts.lists, watch.counts.expired) == (1, 0)
    assert watch.counts.watches >= 2


def test_the_synced_view_follows_jobs_created_and_deleted(
    cluster: Cluster, namespace: str, database_url: str
) -> None:
    jobs = RunJobs(cluster.api, namespace)
    _create(jobs, 21)
    database = Database(database_url, pool_size=1)
    objects = RunObjects(database, jobs, watch_timeout_seconds=1)
    stop = threading.Event()
    assert objects.existing_run_ids() is None  # not synced: the sweeper judges no run
    assert objects.pending_pods() is None
    try:
        objects.follow_jobs(stop, lambda failed: None)
        assert objects.existing_run_ids() == {21}
        _create(jobs, 22)
        _delete(jobs, 21)

        def followed() -> bool:
            objects.follow_jobs(stop, lambda failed: None)
            return objects.existing_run_ids() == {22}

        wait_for(followed, TIMEOUT, what="the view to see Job 22 created and 21 deleted")
        assert objects.job_watch.counts.lists == 1
    finally:
        database.dispose()


def test_the_pod_watcher_folds_a_real_pods_exit_once(
    cluster: Cluster, namespace: str, database_url: str, db: Engine
) -> None:
    """End to end on real pod JSON: a run's pod exits 3, the pod watcher fails the run
    with the runner's exit code; passes after it write nothing more."""
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, run_id)
    jobs = RunJobs(cluster.api, namespace)
    _create(jobs, run_id, python_command("import sys; sys.exit(3)"))
    database = Database(database_url, pool_size=1)
    objects = RunObjects(database, jobs, watch_timeout_seconds=1)
    stop = threading.Event()
    failed: list[FailedRun] = []
    try:

        def folded() -> bool:
            objects.follow_pods(stop, failed.extend)
            return bool(failed)

        wait_for(folded, TIMEOUT, what="the pod watcher to fold the pod's exit")
        objects.follow_pods(stop, failed.extend)
        assert objects.pod_watch.counts.lists == 1
    finally:
        database.dispose()
    assert [run.run_id for run in failed] == [run_id]
    assert "exited with code 3" in failed[0].error
    with db.connect() as conn:
        state = conn.execute(text("SELECT state FROM agent_runs WHERE id = :r"), {"r": run_id})
        assert state.scalar_one() == "failed"


def test_the_pod_view_holds_a_runs_pod_until_it_is_gone_and_says_so(
    cluster: Cluster, namespace: str, database_url: str, db: Engine
) -> None:
    """What the dispatcher reads (seed 002 counts runner pods, not rows): a run's pod is
    in `pod_run_ids` while it runs, whatever its row says, and its deletion is told to
    `gone` (the dispatcher's wake) and leaves the view."""
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
    jobs = RunJobs(cluster.api, namespace)
    # The workload: a runner that goes on until its pod is deleted, and ends at the
    # kubelet's SIGTERM as `achilles runner` does (a container's pid 1 has no default
    # action for it: without a handler the pod would take the whole 30 s grace period).
    _create(jobs, run_id, python_command(RUNS_UNTIL_TERMINATED))
    database = Database(database_url, pool_size=1)
    objects = RunObjects(database, jobs, watch_timeout_seconds=1)
    stop = threading.Event()
    gone: list[int] = []

    def follow() -> None:
        objects.follow_pods(stop, lambda failed: None, gone=lambda: gone.append(1))

    try:
        # Not synced: the dispatcher holds every agent whose run ended within the grace.
        assert objects.pod_run_ids() is None

        def present() -> bool:
            follow()
            return objects.pod_run_ids() == {run_id}

        wait_for(present, TIMEOUT, what="the view to see the run's pod")
        assert gone, "the first listing was not told (the dispatcher waits for it)"
        told = len(gone)
        jobs.delete(run_id, foreground=True)

        def went() -> bool:
            follow()
            return objects.pod_run_ids() == set()

        wait_for(went, TIMEOUT, what="the view to see the run's pod gone")
        assert len(gone) > told, "the pod's end was not told"
    finally:
        database.dispose()
