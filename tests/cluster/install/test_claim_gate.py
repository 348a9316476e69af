"""The claim is the last start gate, on the real control plane (issue 36 item 2): a lock
closed after the dispatcher made a run's Job, while its pod is starting, stops the run
with no trace, its Job goes, and `achilles run-now --wait` says why (exit 3).

The pod is held at its claim by a gate it can see, a TCP listener of the test on the
address pods reach this machine at (`slow_runner.py`, ACHILLES_TEST_CLAIM_GATE), while
the admin's lock closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from achilles.k8s.run_metadata import AGENT_ID_LABEL, RUN_ID_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    ClaimGate,
    OperatorProcess,
    claim_gate,
    journal_rows,
    new_owner,
    run_jobs,
    running_operator,
    slow_runner_command,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def gate(cluster: Cluster) -> Iterator[ClaimGate]:
    with claim_gate(cluster) as gate:
        yield gate


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster,
    achilles_release: Release,
    gate: ClaimGate,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    env = {
        "ACHILLES_RUNNER_COMMAND": slow_runner_command(),
        "ACHILLES_RUNNER_ENV": json.dumps(
            {"ACHILLES_TEST_HOLD_SECONDS": "1", "ACHILLES_TEST_CLAIM_GATE": gate.address}
        ),
    }
    log = tmp_path_factory.mktemp("claim-gate") / "operator.log"
    with running_operator(cluster, achilles_release, log, **env) as process:
        yield process


def _run_now(cluster: Cluster, release: Release, target: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "ACHILLES_DATABASE_URL": release.database_url,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "achilles", "run-now", target, "--wait", "--timeout", "120"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_an_admins_pause_after_the_job_was_made_stops_the_run_with_no_trace(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    achilles_admin_api: Achilles,
    operator: OperatorProcess,
    journal: Engine,
    namespace: str,
    gate: ClaimGate,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    admin_api.create(agent("gated", owner=new_owner(journal), model=model), namespace)
    status = wait_status(
        admin_api, "gated", namespace, lambda s: s.get("phase") == "Ready", "Ready"
    )
    agent_id = status["databaseId"]

    gate.close()
    waiting = _run_now(cluster, achilles_release, f"{namespace}/gated")
    try:
        job = wait_for(
            lambda: next(
                (
                    j
                    for j in run_jobs(cluster)
                    if j.metadata.labels.get(AGENT_ID_LABEL) == str(agent_id)
                ),
                None,
            ),
            60,
            what="the run's Job",
            interval=0.2,
        )
        run_id = int(job.metadata.labels[RUN_ID_LABEL])
        wait_for(gate.waiting, 120, what="the run's pod at its claim", interval=0.2)
        # The pod is at its claim; the admin pauses the agent meanwhile.
        achilles_admin_api.patch("Agent", "gated", {"spec": {"adminPaused": True}}, namespace)
        wait_for(
            lambda: journal_rows(
                journal, "SELECT 1 FROM agents WHERE id = :a AND admin_paused", a=agent_id
            ),
            30,
            what="the pause in the journal",
            interval=0.2,
        )
        assert journal_rows(journal, "SELECT state FROM agent_runs WHERE id = :r", r=run_id) == [
            ("queued",)
        ]
    finally:
        gate.open()

    out, err = waiting.communicate(timeout=150)
    assert waiting.returncode == 3, (out, err)
    assert "an admin paused the agent" in out + err
    # No trace in the journal: not failed, not skipped (seed 000).
    assert journal_rows(journal, "SELECT id FROM agent_runs WHERE agent_id = :a", a=agent_id) == []
    wait_for(
        lambda: not [j for j in run_jobs(cluster) if j.metadata.name == job.metadata.name],
        60,
        what="the run's Job deleted",
        interval=0.5,
    )
    refused = wait_for(
        lambda: [
            e
            for e in cluster.core.list_namespaced_event(namespace).items
            if e.reason == "RunRefused" and e.involved_object.name == "gated"
        ],
        30,
        what="the RunRefused Event",
        interval=0.5,
    )
    assert any("an admin paused the agent" in (e.message or "") for e in refused)
