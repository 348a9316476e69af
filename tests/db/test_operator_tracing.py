"""The operator's own spans (issue 21): a scheduler pass, a dispatch and the folds of a
failed pod and a failed Job, each made by the operator's code on the real database with
its spans exported over OTLP to a real collector (Jaeger v2, `tests/jaeger_collector.py`)
and read back from its query API. The Kubernetes side is recorded, not sent: the Job
manifests are kept, the pod and Job listings are served from memory (the cluster tier's
`test_dev_demo` sees the chart's operator export its dispatch span)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.runs import RunTrigger
from achilles.domain.trace_context import TRACEPARENT_ENV
from achilles.handlers import manager
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import RuntimeContext
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.objects import Resources
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUN_SELECTOR, job_name
from achilles.services.dispatch import dispatch_queued_runs
from achilles.services.outcomes import FailedRun
from achilles.telemetry.operator_spans import OperatorSpans
from achilles.telemetry.settings import ENDPOINT_ENV
from achilles_dev.jaeger import RunningJaeger, Span
from tests.db.factories import make_agent
from tests.waiting import wait_for

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)
MANAGED_BY = dict([RUN_SELECTOR.split("=")])


class _Response:
    """A raw response of the API server (`_preload_content=False`): a listing's body, or
    a watch's stream of events that ends at once."""

    def __init__(self, body: dict[str, Any] | None) -> None:
        self.data = json.dumps(body).encode() if body is not None else b""

    def stream(self, amt: Any = None, decode_content: Any = None) -> Iterator[bytes]:
        return iter(())

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Listing:
    """`list_namespaced_pod` / `list_namespaced_job` over fixed objects."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __call__(self, namespace: str, **kwargs: Any) -> _Response:
        if kwargs.get("watch"):
            return _Response(None)
        return _Response({"metadata": {"resourceVersion": "1"}, "items": self.items})


class _RunNamespace:
    """The runs namespace as the operator's `RunJobs` sees it: Jobs created are kept
    (their manifests), pods and Jobs are listed from what the test put there."""

    namespace = TEMPLATE.namespace

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.pods = _Listing([])
        self.jobs = _Listing([])
        self.core = type("Core", (), {"list_namespaced_pod": self.pods})()
        self.batch = type("Batch", (), {"list_namespaced_job": self.jobs})()

    def create(self, manifest: dict[str, Any], secret: object) -> bool:
        self.created.append(manifest)
        return True

    def list_pods(self, run_id: int | None = None) -> list[Any]:
        return []

    def delete(self, run_id: int) -> bool:
        return True


def _failed_pod(run_id: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job_name(run_id)}-abcde",
            "labels": {**MANAGED_BY, RUN_ID_LABEL: str(run_id)},
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "runner", "state": {"terminated": {"reason": "Error", "exitCode": 137}}}
            ],
        },
    }


def _failed_job(run_id: int) -> dict[str, Any]:
    return {
        "metadata": {"name": job_name(run_id), "labels": MANAGED_BY},
        "spec": {"activeDeadlineSeconds": 900},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        },
    }


def _running_run(db: Engine) -> int:
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, run_id)
    return run_id


def _queued_run(db: Engine) -> int:
    with Session(db) as session, session.begin():
        return journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id


@pytest.fixture
def service(jaeger: RunningJaeger, monkeypatch: pytest.MonkeyPatch) -> str:
    """The OTLP endpoint set as the operator's Deployment gets it, and a service name of
    this test's own (the session's collector keeps other tests' spans)."""
    monkeypatch.setenv(ENDPOINT_ENV, jaeger.otlp_endpoint)
    return f"achilles-operator-{uuid.uuid4().hex[:8]}"


def _exported(jaeger: RunningJaeger, service: str, names: set[str]) -> list[Span] | None:
    found = [span for trace in jaeger.traces_of(service) for span in trace]
    return found if names <= {span.name for span in found} else None


def test_the_operators_passes_dispatch_and_folds_are_exported(
    db: Engine, database_url: str, jaeger: RunningJaeger, service: str
) -> None:
    queued, pod_run, job_run = _queued_run(db), _running_run(db), _running_run(db)
    namespace = _RunNamespace()
    jobs = cast(RunJobs, namespace)
    spans = OperatorSpans(service_name=service)  # as `configure` makes them, when on
    database = Database(database_url, pool_size=2)
    try:
        context = RuntimeContext(
            config=OperatorConfig(database_url, TEMPLATE, 0, timedelta(minutes=5)),
            database=database,
            resources=cast(Resources, None),  # no Event is posted: nothing is skipped
            jobs=jobs,
            spans=spans,
        )
        manager.scheduler_of(context).schedule_once(repair=True)
        created = dispatch_queued_runs(database, jobs, TEMPLATE, spans=spans).created
        assert [run.run_id for run in created] == [queued]
        # A failed pod and a failed Job come with the watchers' first listings.
        namespace.pods.items.append(_failed_pod(pod_run))
        namespace.jobs.items.append(_failed_job(job_run))
        failed: list[FailedRun] = []
        context.run_objects.follow_pods(threading.Event(), failed.extend)
        context.run_objects.follow_jobs(threading.Event(), failed.extend)
        assert sorted(run.run_id for run in failed) == sorted([pod_run, job_run])
    finally:
        database.dispose()
        exported_in_time = spans.close(10.0)
    assert exported_in_time

    names = {"scheduler pass", "dispatch", "fold pods", "fold jobs"}
    exported = wait_for(
        lambda: _exported(jaeger, service, names), timeout=30, what="the operator's spans"
    )
    by_name = {span.name: span for span in exported}
    assert len(exported) == len(names)  # one of each: folds that cannot write make none
    assert {span.service for span in exported} == {service}
    assert all(span.parent_id is None for span in exported)  # each the root of its trace
    assert by_name["scheduler pass"].attributes["achilles.scheduler.repair"] is True
    assert by_name["scheduler pass"].attributes["achilles.scheduler.enqueued"] == 0
    dispatch = by_name["dispatch"]
    assert dispatch.attributes["achilles.run.id"] == queued
    assert dispatch.attributes["achilles.dispatch.outcome"] == "created"
    assert dispatch.attributes["k8s.job.name"] == job_name(queued)
    # The Job carries the dispatch span to its runner (W3C traceparent).
    (manifest,) = namespace.created
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env[TRACEPARENT_ENV].split("-")[2] == dispatch.span_id
    for fold in ("fold pods", "fold jobs"):
        assert by_name[fold].attributes["achilles.fold.judged"] == 1, fold
        assert by_name[fold].attributes["achilles.fold.failed_runs"] == 1, fold
        assert not by_name[fold].error
