"""The run controls end to end (issue 22): the chart's CRDs, the operator, the real
`achilles runner` (as each Job's pod, on the real node) and the model server.

- cancel: a running run cancelled through the Agent's `achilles.io/cancel-run` ends
  `failed/cancelled` once its Job and pod are gone (it holds its agent until then), a
  waiting `achilles run-now --wait` exits 4, and cancelling it again changes nothing;
- the token cap and auto-suspend, on one agent: `spec.maxRunTokens: 1` fails its run
  `token_cap` at the first call; with `spec.suspendAfterFailures: 1` its next slot
  switches it off instead of running (the operator writes `spec.enabled: false`: the
  owner's lock, no third one; phase Suspended, why and how to resume), a manual run is
  refused, neither a changed spec nor an admin's pause and release resume it, and the
  owner's `spec.enabled: true` does; the API server refuses a cap of 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from achilles.domain.run_controls import suspension_message
from achilles.k8s.annotations import CANCEL_RUN
from achilles.k8s.run_metadata import RUN_ID_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles, rejection
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    OperatorProcess,
    model_server,
    new_owner,
    run_jobs,
    running_operator,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# Every call of this model holds its reply: a run that is running until it is cancelled.
HOLDING_SCRIPT = {"rules": [{"reply": {"content": "held", "delay_seconds": 600}}]}


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, achilles_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("run-controls") / "operator.log"
    with running_operator(cluster, achilles_release, log) as process:
        yield process


@pytest.fixture(scope="module")
def models(
    cluster: Cluster, admin_api: Achilles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """`demo`: the default script (a search, then an answer; usage on every call);
    `holding`: a model that never answers in time."""
    script = tmp_path_factory.mktemp("script") / "hold.json"
    script.write_text(json.dumps(HOLDING_SCRIPT))
    names = {"demo": f"demo-{uuid.uuid4().hex[:6]}", "holding": f"hold-{uuid.uuid4().hex[:6]}"}
    with model_server(cluster) as demo, model_server(cluster, script) as holding:
        admin_api.create(agent_model(names["demo"], baseURL=demo.base_url))
        admin_api.create(agent_model(names["holding"], baseURL=holding.base_url))
        yield names
        for name in names.values():
            admin_api.delete("AgentModel", name)


def _row(journal: Engine, run_id: int) -> Any:
    with journal.begin() as conn:
        return conn.execute(text("SELECT * FROM agent_runs WHERE id = :r"), {"r": run_id}).one()


def _annotate(api: Achilles, name: str, namespace: str, key: str, value: str) -> None:
    api.patch("Agent", name, {"metadata": {"annotations": {key: value}}}, namespace)


def _achilles(cluster: Cluster, release: Release, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "ACHILLES_DATABASE_URL": release.database_url,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "achilles", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _pods_of(cluster: Cluster, run_id: int) -> list[Any]:
    pods = cluster.core.list_namespaced_pod(
        "achilles-runs", label_selector=f"{RUN_ID_LABEL}={run_id}"
    ).items
    return list(pods)


def test_a_running_run_cancelled_through_its_agent_ends_and_its_job_goes(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    models: dict[str, str],
    journal: Engine,
    namespace: str,
) -> None:
    admin_api.create(agent("held", owner=new_owner(journal), model=models["holding"]), namespace)
    wait_status(admin_api, "held", namespace, lambda s: s.get("phase") == "Ready", "Ready")
    waiting = _achilles(cluster, achilles_release, "run-now", f"{namespace}/held", "--wait")
    status = wait_status(
        admin_api,
        "held",
        namespace,
        lambda s: (s.get("lastRun") or {}).get("state") == "running",
        "the run to be running",
        timeout=120,
    )
    run_id = status["lastRun"]["id"]
    assert any(job.metadata.name.endswith(f"-{run_id}") for job in run_jobs(cluster))

    _annotate(admin_api, "held", namespace, CANCEL_RUN, str(run_id))
    row = wait_for(
        lambda: (r := _row(journal, run_id)).state != "running" and r,
        60,
        what="the run to end",
    )
    assert (row.state, row.reason) == ("failed", "cancelled"), operator.log()
    # The run held its agent until its pod was gone (issue 36 item 3; seed 002): its Job
    # was deleted pods first, and the run ended when the Job was gone.
    assert not _pods_of(cluster, run_id)
    assert not any(j.metadata.name.endswith(f"-{run_id}") for j in run_jobs(cluster))
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 4, out + err
    assert f"cancelled: run {run_id} was cancelled" in err
    status = wait_status(
        admin_api,
        "held",
        namespace,
        lambda s: (
            s.get("lastHandledCancelRequest") == str(run_id)
            and (s.get("lastRun") or {}).get("reason") == "cancelled"
        ),
        "the status to show the cancel",
    )

    # Again, through the CLI: it ended, nothing changes, and it says so.
    again = _achilles(cluster, achilles_release, "runs", "cancel", str(run_id))
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert out.strip() == f"run {run_id} had already ended (failed/cancelled): nothing changed"
    assert _row(journal, run_id) == row


def test_the_token_cap_fails_the_run_and_failures_switch_the_agent_off_until_its_owner_resumes(
    cluster: Cluster,
    admin_api: Achilles,
    achilles_admin_api: Achilles,
    operator: OperatorProcess,
    models: dict[str, str],
    journal: Engine,
    namespace: str,
) -> None:
    status_code, message = rejection(
        lambda: admin_api.create(
            agent("zero", owner=new_owner(journal), model=models["demo"], maxRunTokens=0),
            namespace,
        )
    )
    assert status_code == 422
    assert "spec.maxRunTokens" in message
    assert "greater than or equal to 1" in message

    spec = {"maxRunTokens": 1, "suspendAfterFailures": 1}
    hourly = {"type": "interval", "everyHours": 1}
    admin_api.create(
        agent("capped", owner=new_owner(journal), model=models["demo"], schedule=hourly, **spec),
        namespace,
    )
    status = wait_status(
        admin_api, "capped", namespace, lambda s: s.get("nextRunAt"), "Ready with a slot"
    )
    agent_id = status["databaseId"]
    _annotate(admin_api, "capped", namespace, "achilles.io/run-requested-at", "first")
    status = wait_status(
        admin_api,
        "capped",
        namespace,
        lambda s: (s.get("lastRun") or {}).get("state") == "failed",
        "the manual run to fail",
        timeout=120,
    )
    run = _row(journal, status["lastRun"]["id"])
    assert (run.state, run.reason) == ("failed", "token_cap"), run.error
    assert run.tokens_used >= 1
    assert run.error.endswith("reaching its cap of 1 (maxRunTokens)")

    # Its slot comes due: one failure in a row switches it off, and no run is made.
    runs_before = _run_count(journal, agent_id)
    with journal.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now() - interval '1 second' WHERE id = :a"),
            {"a": agent_id},
        )
    status = wait_status(
        admin_api, "capped", namespace, lambda s: s.get("phase") == "Suspended", "Suspended"
    )
    assert status.get("nextRunAt") is None
    assert status["suspendedAt"]
    (scheduled,) = [c for c in status["conditions"] if c["type"] == "Scheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SuspendedAfterFailures")
    assert "set spec.enabled: true to resume" in scheduled["message"]
    assert _run_count(journal, agent_id) == runs_before
    # The owner's lock, as the seed has it: the operator wrote spec.enabled: false.
    wait_for(
        lambda: admin_api.get("Agent", "capped", namespace)["spec"].get("enabled") is False,
        30,
        what="spec.enabled: false written by the operator",
        interval=0.5,
    )
    suspended = wait_for(
        lambda: [
            e
            for e in cluster.core.list_namespaced_event(namespace).items
            if e.reason == "AgentSuspended" and e.involved_object.name == "capped"
        ],
        30,
        what="the AgentSuspended Event",
        interval=0.5,
    )
    assert [(e.type, e.message) for e in suspended] == [
        ("Warning", suspension_message(1, [run.id]))
    ]

    # A manual run is refused, as under any closed lock: no row.
    _annotate(admin_api, "capped", namespace, "achilles.io/run-requested-at", "second")
    status = wait_status(
        admin_api,
        "capped",
        namespace,
        lambda s: s.get("lastHandledRunRequest") == "second",
        "the manual run while suspended handled",
        timeout=60,
    )
    (accepted,) = [c for c in status["conditions"] if c["type"] == "RunRequestAccepted"]
    assert accepted["status"] == "False"
    assert _run_count(journal, agent_id) == runs_before

    # Neither a changed spec nor an admin's pause and release resume it.
    admin_api.patch("Agent", "capped", {"spec": {"maxRunTokens": 100000}}, namespace)
    achilles_admin_api.patch("Agent", "capped", {"spec": {"adminPaused": True}}, namespace)
    wait_status(admin_api, "capped", namespace, lambda s: s.get("phase") == "Disabled", "paused")
    achilles_admin_api.patch("Agent", "capped", {"spec": {"adminPaused": False}}, namespace)
    status = wait_status(
        admin_api, "capped", namespace, lambda s: s.get("phase") == "Suspended", "still off"
    )
    assert status.get("nextRunAt") is None

    # The owner switches it on: the schedule resumes.
    admin_api.patch("Agent", "capped", {"spec": {"enabled": True}}, namespace)
    status = wait_status(
        admin_api,
        "capped",
        namespace,
        lambda s: s.get("phase") == "Ready" and s.get("nextRunAt"),
        "resumed with a slot",
    )
    assert not status.get("suspendedAt")


def _run_count(journal: Engine, agent_id: int) -> int:
    with journal.begin() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM agent_runs WHERE agent_id = :a"), {"a": agent_id}
            ).scalar_one()
        )
