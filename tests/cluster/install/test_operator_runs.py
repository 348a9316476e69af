"""The operator's run guarantees on the real control plane and PostgreSQL: one run per
request, the concurrency cap and FIFO with two replicas, nothing lost or doubled when the
operator is SIGKILLed mid-dispatch, a killed runner failed via its pod, an agent deleted
mid-run. The runner is the tests' slow one (`slow_runner.py`) where the LLM is not the point."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from achilles.handlers.controllers.sweeper import PENDING_PODS_EVERY
from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    OperatorProcess,
    run_jobs,
    runner_pid,
    running_operator,
    slow_runner_command,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

START_DEADLINE_SECONDS = 10

CAP = 2


def _env(cluster: Cluster, hold: float) -> dict[str, str]:
    return {
        "ACHILLES_RUNNER_COMMAND": slow_runner_command(),
        "ACHILLES_RUNNER_ENV": json.dumps({"ACHILLES_TEST_HOLD_SECONDS": str(hold)}),
    }


@pytest.fixture(scope="module")
def setup(admin_api: Achilles, journal: Engine) -> Iterator[str]:
    with journal.begin() as conn:
        conn.execute(text("INSERT INTO users (key) VALUES ('alice') ON CONFLICT DO NOTHING"))
    name = f"slow-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(name))
    # AgentPlatform/default is the release's: only Helm may change it (as `helm upgrade
    # --set maxConcurrency=...` would, without touching the quota).
    admin_api.apply_platform_as_helm(maxConcurrency=CAP)
    yield name
    admin_api.apply_platform_as_helm(maxConcurrency=4)
    admin_api.delete("AgentModel", name)


def _rows(journal: Engine, sql: str, **params: Any) -> list[Any]:
    with journal.begin() as conn:
        return list(conn.execute(text(sql), params))


def _agent_id(journal: Engine, namespace: str, name: str) -> int:
    return int(
        wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT id FROM agents WHERE cr_namespace = :n AND cr_name = :a",
                    n=namespace,
                    a=name,
                )
                or [None]
            )[0],
            60,
            what=f"the row of {namespace}/{name}",
        )[0]
    )


def _request(admin_api: Achilles, name: str, namespace: str) -> str:
    value = format_run_request(datetime.now(UTC))
    admin_api.patch(
        "Agent", name, {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
    )
    return value


def test_rapid_requests_never_make_two_active_runs(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    setup: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    with running_operator(
        cluster, achilles_release, tmp_path / "op.log", **_env(cluster, 4.0)
    ) as operator:
        admin_api.create(agent("rapid", model=setup), namespace)
        agent_id = _agent_id(journal, namespace, "rapid")
        requests = [_request(admin_api, "rapid", namespace) for _ in range(20)]
        wait_for(
            lambda: (
                admin_api.get("Agent", "rapid", namespace)
                .get("status", {})
                .get("lastHandledRunRequest")
                == requests[-1]
            ),
            60,
            what="the last request to be handled",
        )
        rows = _rows(
            journal, "SELECT request_key, state FROM agent_runs WHERE agent_id = :a", a=agent_id
        )
        keys = [row.request_key for row in rows]
        assert len(keys) == len(set(keys)), "a request was run twice"
        assert set(keys) <= set(requests)
        active = [row for row in rows if row.state in ("queued", "running")]
        assert len(active) <= 1
        assert all(row.state in ("queued", "running", "succeeded", "skipped") for row in rows), (
            operator.log()
        )


def test_cap_and_fifo_hold_with_two_replicas_and_a_killed_operator(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    setup: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    names = [f"due-{i}" for i in range(3 * CAP)]
    first = OperatorProcess(
        cluster, achilles_release, tmp_path / "a.log", env_overrides=_env(cluster, 3.0)
    )
    second = OperatorProcess(
        cluster, achilles_release, tmp_path / "b.log", env_overrides=_env(cluster, 3.0)
    )
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(
                _rows(journal, "SELECT count(*) AS n FROM agent_runs WHERE state = 'running'")[0].n
            )
            time.sleep(0.1)

    with running_operator(cluster, achilles_release, tmp_path / "boot.log", **_env(cluster, 3.0)):
        for name in names:
            admin_api.create(
                agent(name, model=setup, schedule={"type": "interval", "everyHours": 24}), namespace
            )
        ids = [_agent_id(journal, namespace, name) for name in names]
        wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT count(*) AS n FROM agents"
                    " WHERE id = ANY(:i) AND next_run_at IS NOT NULL",
                    i=ids,
                )[0].n
                == len(ids)
            ),
            60,
            what="every agent to have a slot",
        )
    # The slot arrives for all of them at once (the clock, injected through next_run_at).
    with journal.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now() - interval '1 second' WHERE id = ANY(:i)"),
            {"i": ids},
        )
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    first.start()
    second.start()
    try:
        # Kill one replica as soon as it has dispatched something, then bring it back.
        wait_for(lambda: run_jobs(cluster), 60, what="a first Job")
        first.kill()
        first.start()
        wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT count(*) AS n FROM agent_runs"
                    " WHERE agent_id = ANY(:i) AND state = 'succeeded'",
                    i=ids,
                )[0].n
                == len(ids)
            ),
            180,
            what="every scheduled run to succeed",
        )
    finally:
        stop.set()
        first.stop()
        second.stop()
    runs = _rows(
        journal,
        "SELECT id, agent_id, trigger, created_at, started_at FROM agent_runs"
        " WHERE agent_id = ANY(:i) ORDER BY id",
        i=ids,
    )
    assert len(runs) == len(ids), f"expected one run per agent, got {runs}"
    assert {run.agent_id for run in runs} == set(ids)
    assert max(samples) <= CAP, f"cap exceeded: {max(samples)} running at once"
    assert max(samples) == CAP, "the cap was never reached: nothing ran in parallel"
    job_names = [job.metadata.name for job in run_jobs(cluster)]
    assert len(job_names) == len(set(job_names))
    # FIFO: runs start in the order they were queued, up to the cap's parallelism.
    started = sorted(runs, key=lambda run: run.started_at)
    created_rank = {
        run.id: rank for rank, run in enumerate(sorted(runs, key=lambda r: (r.created_at, r.id)))
    }
    for position, run in enumerate(started):
        assert abs(created_rank[run.id] - position) < CAP, f"run {run.id} started out of order"


def test_killed_runner_fails_via_its_pod_and_deleted_agent_removes_its_job(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    setup: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    with running_operator(
        cluster, achilles_release, tmp_path / "op.log", **_env(cluster, 120.0)
    ) as operator:
        admin_api.create(agent("victim", model=setup), namespace)
        agent_id = _agent_id(journal, namespace, "victim")
        _request(admin_api, "victim", namespace)
        run = wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT id FROM agent_runs WHERE agent_id = :a AND state = 'running'",
                    a=agent_id,
                )
                or [None]
            )[0],
            60,
            what="the run to be running",
        )
        pid = wait_for(
            lambda: runner_pid(run.id, achilles_release), 30, what="the runner's process"
        )
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        failed = wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT state, reason, error FROM agent_runs"
                    " WHERE id = :r AND state = 'failed'",
                    r=run.id,
                )
                or [None]
            )[0],
            30,
            what="the killed run to be failed",
        )
        assert failed.reason == "error"
        assert "exited with code" in failed.error, failed.error
        assert time.monotonic() - killed_at < 30, operator.log()

        admin_api.create(agent("doomed", model=setup), namespace)
        doomed_id = _agent_id(journal, namespace, "doomed")
        _request(admin_api, "doomed", namespace)
        doomed_run = wait_for(
            lambda: (
                _rows(
                    journal,
                    "SELECT id FROM agent_runs WHERE agent_id = :a AND state = 'running'",
                    a=doomed_id,
                )
                or [None]
            )[0],
            60,
            what="the doomed agent's run",
        )
        admin_api.delete("Agent", "doomed", namespace)
        wait_for(
            lambda: not _rows(journal, "SELECT 1 FROM agents WHERE id = :a", a=doomed_id),
            30,
            what="the row to go",
        )
        assert not _rows(journal, "SELECT 1 FROM agent_runs WHERE id = :r", r=doomed_run.id)
        wait_for(
            lambda: (
                f"achilles-run-{doomed_run.id}" not in [j.metadata.name for j in run_jobs(cluster)]
            ),
            30,
            what="the Job to be removed",
        )


def test_a_run_whose_models_secret_is_missing_fails_at_the_start_deadline(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    setup: str,  # the owner alice
    namespace: str,
    tmp_path: Path,
) -> None:
    """The pod waits on a Secret that does not exist (`CreateContainerConfigError`) and its
    status never changes again, so no watch event comes after the start deadline: the
    sweeper's pass fails the run (found by `achilles chaos bad-input`, no-secret). The
    installation's deadline (`ACHILLES_START_DEADLINE_SECONDS`) is shortened here: the
    default's minute would only be waited out."""
    model = f"nosecret-{uuid.uuid4().hex[:6]}"
    admin_api.create(
        agent_model(model, apiKeySecretRef={"name": "achilles-test-missing", "key": "k"})
    )
    try:
        with running_operator(
            cluster,
            achilles_release,
            tmp_path / "op.log",
            **_env(cluster, 1.0),
            ACHILLES_START_DEADLINE_SECONDS=str(START_DEADLINE_SECONDS),
        ) as op:
            admin_api.create(agent("keyless", model=model), namespace)
            agent_id = _agent_id(journal, namespace, "keyless")
            _request(admin_api, "keyless", namespace)
            requested_at = time.monotonic()
            limit = START_DEADLINE_SECONDS + PENDING_PODS_EVERY + 30
            failed = wait_for(
                lambda: (
                    _rows(
                        journal,
                        "SELECT state, reason, error FROM agent_runs"
                        " WHERE agent_id = :a AND state = 'failed'",
                        a=agent_id,
                    )
                    or [None]
                )[0],
                limit,
                what="the run whose Secret is missing to fail",
            )
            assert failed.reason == "error", op.log()
            assert "CreateContainerConfigError" in failed.error, failed.error
            assert "achilles-test-missing" in failed.error, failed.error
            # Not before the deadline: the pod's age counts from its creationTimestamp,
            # which has whole seconds (floored), so the verdict may come up to 1 s early.
            assert time.monotonic() - requested_at >= START_DEADLINE_SECONDS - 1
            admin_api.delete("Agent", "keyless", namespace)
    finally:
        admin_api.delete("AgentModel", model)
