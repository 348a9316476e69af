"""The operator end to end on the real control plane and PostgreSQL: an Agent applied
like kubectl does becomes a row, a status, and runs that execute as real Jobs (the
real node runs the runner image, which talks to the offline model server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import create_engine, text

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    OperatorProcess,
    model_server,
    run_jobs,
    running_operator,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.db import inbox_support as box
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, achilles_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    with running_operator(
        cluster, achilles_release, tmp_path_factory.mktemp("operator") / "operator.log"
    ) as process:
        yield process


@pytest.fixture(scope="module")
def model(cluster: Cluster, admin_api: Achilles, achilles_release: Release) -> Iterator[str]:
    name = f"m-{uuid.uuid4().hex[:6]}"
    with model_server(cluster) as server:
        admin_api.create(agent_model(name, baseURL=server.base_url))
        yield name
        admin_api.delete("AgentModel", name)


def _sql(release: Release, statement: str, **params: object) -> list[tuple[object, ...]]:
    engine = create_engine(release.database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _user(release: Release, key: str, *, active: bool = True) -> None:
    _sql(
        release,
        "INSERT INTO users (key, active) VALUES (:k, :a)"
        " ON CONFLICT (key) DO UPDATE SET active = :a",
        k=key,
        a=active,
    )


def _request(admin_api: Achilles, name: str, namespace: str) -> str:
    value = format_run_request(datetime.now(UTC))
    admin_api.patch(
        "Agent", name, {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
    )
    return value


def test_applied_agent_runs_to_succeeded_through_a_job(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    model: str,
    namespace: str,
) -> None:
    _user(achilles_release, "alice")
    admin_api.create(
        agent("digest", model=model, schedule={"type": "interval", "everyHours": 6}), namespace
    )
    status = wait_status(
        admin_api,
        "digest",
        namespace,
        lambda s: s.get("phase") == "Ready" and s.get("nextRunAt"),
        "the agent to be Ready with a next slot",
    )
    assert status["databaseId"] >= 1
    assert status["scheduleSummary"] == "every 6h"

    request = _request(admin_api, "digest", namespace)
    status = wait_status(
        admin_api,
        "digest",
        namespace,
        lambda s: (s.get("lastRun") or {}).get("state") == "succeeded",
        "the manual run to succeed",
        timeout=120,
    )
    assert status["lastHandledRunRequest"] == request
    assert status["lastRun"]["trigger"] == "manual"
    assert status["lastRun"]["tokensUsed"] > 0
    assert status["weeklyTokens"]["used"] >= status["lastRun"]["tokensUsed"]
    run_id = status["lastRun"]["id"]
    rows = _sql(
        achilles_release, "SELECT state, request_key FROM agent_runs WHERE id = :i", i=run_id
    )
    assert rows == [("succeeded", request)]
    jobs = [job.metadata.name for job in run_jobs(cluster)]
    assert f"achilles-run-{run_id}" in jobs, operator.log()


def test_closed_lock_refuses_a_manual_run_without_a_row(
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    model: str,
    namespace: str,
) -> None:
    _user(achilles_release, "alice")
    admin_api.create(agent("off", model=model, enabled=False), namespace)
    status = wait_status(
        admin_api, "off", namespace, lambda s: s.get("phase") == "Disabled", "phase Disabled"
    )
    request = _request(admin_api, "off", namespace)
    status = wait_status(
        admin_api,
        "off",
        namespace,
        lambda s: s.get("lastHandledRunRequest") == request,
        "the request to be handled",
    )
    accepted = {c["type"]: c for c in status["conditions"]}["RunRequestAccepted"]
    assert accepted["status"] == "False"
    assert "switched the agent off" in accepted["message"]
    rows = _sql(
        achilles_release,
        "SELECT count(*) FROM agent_runs WHERE agent_id = :a",
        a=status["databaseId"],
    )
    assert rows == [(0,)]
    wait_for(
        lambda: [
            e
            for e in admin_api_events(admin_api, namespace)
            if e.reason == "RunRefused" and e.involved_object.name == "off"
        ],
        30,
        what="a RunRefused Event",
    )


def admin_api_events(admin_api: Achilles, namespace: str) -> list[Any]:
    return list(
        client.CoreV1Api(admin_api.custom.api_client).list_namespaced_event(namespace).items
    )


def test_missing_owner_is_a_condition_not_a_crash(
    admin_api: Achilles, operator: OperatorProcess, model: str, namespace: str
) -> None:
    admin_api.create(
        agent("orphan", owner=f"nobody-{uuid.uuid4().hex[:6]}", model=model), namespace
    )
    status = wait_status(
        admin_api, "orphan", namespace, lambda s: s.get("phase") == "OwnerMissing", "OwnerMissing"
    )
    assert "databaseId" not in status
    assert operator.process is not None
    assert operator.process.poll() is None


def _run_now(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "achilles", "run-now", *args],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_run_now_follows_the_run_and_says_how_it_ended(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    achilles_admin_api: Achilles,
    operator: OperatorProcess,
    model: str,
    namespace: str,
) -> None:
    _user(achilles_release, "alice")
    admin_api.create(agent("now", model=model), namespace)
    # Only the admin groups may set adminPaused (the chart's admission policy).
    achilles_admin_api.create(agent("paused", model=model, adminPaused=True), namespace)
    wait_status(admin_api, "now", namespace, lambda s: s.get("phase") == "Ready", "Ready")

    done = _run_now(cluster, f"{namespace}/now", "--wait", "--timeout", "180")
    assert done.returncode == 0, (done.stdout, done.stderr, operator.log())
    assert "succeeded" in done.stdout

    refused = _run_now(cluster, "paused", "-n", namespace, "--wait", "--timeout", "60")
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "admin paused" in refused.stderr

    missing = _run_now(cluster, f"{namespace}/nope")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: Agent ")

    bad = _run_now(cluster, "a/b/c")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


def test_a_reply_in_the_inbox_wakes_the_agent_end_to_end(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    model: str,
    namespace: str,
) -> None:
    _user(achilles_release, "alice")
    admin_api.create(agent("waker", model=model), namespace)
    status = wait_status(admin_api, "waker", namespace, lambda s: s.get("databaseId"), "a row")
    agent_id = status["databaseId"]
    _sql(
        achilles_release,
        'UPDATE agents SET meta = \'{"inbox": {"wake_on_reply": true}}\'::jsonb WHERE id = :a',
        a=agent_id,
    )
    engine = create_engine(
        achilles_release.database_url.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        item = box.ask(engine, agent_id).item
    finally:
        engine.dispose()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "achilles",
            "inbox",
            "reply",
            str(item.id),
            "--text",
            "Go",
            "--json",
        ],
        env={
            **os.environ,
            "ACHILLES_DATABASE_URL": achilles_release.database_url,
            "KUBECONFIG": str(cluster.kubeconfig),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    request = json.loads(done.stdout)["wake"]["annotation"][RUN_REQUESTED_AT]
    status = wait_status(
        admin_api,
        "waker",
        namespace,
        lambda s: (
            s.get("lastHandledRunRequest") == request
            and (s.get("lastRun") or {}).get("state") == "succeeded"
        ),
        "the woken run to succeed",
        timeout=120,
    )
    rows = _sql(
        achilles_release,
        "SELECT trigger, request_key FROM agent_runs WHERE agent_id = :a",
        a=agent_id,
    )
    assert rows == [("manual", request)]
