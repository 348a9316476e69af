"""The operator and the durable locks that change under it, on the real control plane:
model withdrawal and re-creation, a model and a tool created after their agent (and the
tool deleted and created again), owner deactivation through the CLI, a calendar slot
firing, and a frozen runner reaped from its heartbeat while its pod looks alive."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    OperatorProcess,
    agent_spec,
    agent_status,
    journal_rows,
    new_owner,
    run_jobs,
    runner_pid,
    running_operator,
)
from tests.cluster.install.test_operator_runs import _env
from tests.crd_cases import agent, agent_model, agent_tool
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

STALE_AFTER_SECONDS = 6


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, achilles_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    env = {**_env(cluster, 600.0), "ACHILLES_STALE_AFTER_SECONDS": str(STALE_AFTER_SECONDS)}
    log = tmp_path_factory.mktemp("locks") / "operator.log"
    with running_operator(cluster, achilles_release, log, **env) as process:
        yield process


def test_a_withdrawn_model_stops_its_agents_and_its_return_revives_nobody(
    admin_api: Achilles, operator: OperatorProcess, journal: Engine, namespace: str
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    admin_api.create(
        agent(
            "w",
            owner=new_owner(journal),
            model=model,
            schedule={"type": "interval", "everyHours": 2},
        ),
        namespace,
    )
    wait_for(
        lambda: agent_status(admin_api, "w", namespace).get("phase") == "Ready", 60, what="Ready"
    )
    admin_api.delete("AgentModel", model)
    wait_for(
        lambda: (
            "model" not in agent_spec(admin_api, "w", namespace)
            and agent_status(admin_api, "w", namespace).get("phase") == "NoModel"
        ),
        60,
        what="spec.model cleared and phase NoModel",
    )
    assert agent_status(admin_api, "w", namespace).get("nextRunAt") is None
    admin_api.create(agent_model(model))
    wait_for(
        lambda: journal_rows(journal, "SELECT 1 FROM agent_models WHERE name = :m", m=model),
        60,
        what="the model to be back in the allowlist",
    )
    status = agent_status(admin_api, "w", namespace)
    assert status["phase"] == "NoModel"
    assert "model" not in agent_spec(admin_api, "w", namespace)
    admin_api.delete("AgentModel", model)


def test_an_agent_applied_before_its_model_starts_once_the_model_is_created(
    admin_api: Achilles, operator: OperatorProcess, journal: Engine, namespace: str
) -> None:
    # `kubectl apply -f` of a folder takes agent.yaml before model.yaml.
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent("early", owner=new_owner(journal), model=model), namespace)
    waiting = wait_for(
        lambda: (s := agent_status(admin_api, "early", namespace)).get("phase") == "NoModel" and s,
        60,
        what="NoModel",
    )
    (ready,) = [c for c in waiting["conditions"] if c["type"] == "Ready"]
    assert f"{model} is not an AgentModel" in ready["message"]
    admin_api.create(agent_model(model))
    # No event of the Agent's own follows: the new model has it read again.
    wait_for(
        lambda: agent_status(admin_api, "early", namespace).get("phase") == "Ready",
        60,
        what="the agent Ready once its model exists",
    )
    assert agent_spec(admin_api, "early", namespace)["model"] == model
    admin_api.delete("AgentModel", model)


def test_an_agent_applied_before_its_tool_links_to_it_once_the_tool_is_created(
    admin_api: Achilles, operator: OperatorProcess, journal: Engine, namespace: str
) -> None:
    # As with models: `kubectl apply -f` of a folder takes agent.yaml before tool.yaml.
    model, tool = f"m-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    admin_api.create(
        agent("tooled", owner=new_owner(journal), model=model, tools=[tool]), namespace
    )

    def tools_resolved() -> dict[str, Any] | None:
        conditions = agent_status(admin_api, "tooled", namespace).get("conditions") or []
        found = [c for c in conditions if c.get("type") == "ToolsResolved"]
        return found[0] if found else None

    waiting = wait_for(
        lambda: (c := tools_resolved()) is not None and c["status"] == "False" and c,
        60,
        what="ToolsResolved False",
    )
    assert waiting["message"] == f"not in the tool catalogue: {tool}"
    admin_api.create(agent_tool(tool))
    # No event of the Agent's own follows: the new tool has it read again.
    wait_for(
        lambda: (c := tools_resolved()) is not None and c["status"] == "True",
        60,
        what="ToolsResolved True once the tool exists",
    )

    def linked() -> bool:
        return bool(
            journal_rows(
                journal,
                "SELECT 1 FROM agent_tools l JOIN tools t ON t.id = l.tool_id"
                " JOIN agents a ON a.id = l.agent_id"
                " WHERE a.cr_namespace = :ns AND a.cr_name = 'tooled' AND t.name = :t",
                ns=namespace,
                t=tool,
            )
        )

    assert linked()
    # Deleted, the tool's links go; the CR still names it, so its agent says so (and
    # keeps running on the KS core) and links to it again once it is created again, with
    # no event of the Agent's own either time.
    admin_api.delete("AgentTool", tool)
    gone = wait_for(
        lambda: (c := tools_resolved()) is not None and c["status"] == "False" and c,
        60,
        what="ToolsResolved False once the tool is deleted",
    )
    assert gone["message"] == f"not in the tool catalogue: {tool}"
    assert not linked()
    admin_api.create(agent_tool(tool))
    wait_for(
        lambda: (c := tools_resolved()) is not None and c["status"] == "True",
        60,
        what="ToolsResolved True once the tool is created again",
    )
    assert linked()
    admin_api.delete("AgentTool", tool)
    admin_api.delete("AgentModel", model)


def test_owner_deactivation_switches_the_agent_off_on_its_resource(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    journal: Engine,
    namespace: str,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    owner = new_owner(journal)
    admin_api.create(agent("d", owner=owner, model=model), namespace)
    wait_for(
        lambda: agent_status(admin_api, "d", namespace).get("phase") == "Ready", 60, what="Ready"
    )
    done = subprocess.run(
        [sys.executable, "-m", "achilles", "users", "upsert", owner, "--inactive"],
        env={**os.environ, "ACHILLES_DATABASE_URL": achilles_release.database_url},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: (
            agent_spec(admin_api, "d", namespace).get("enabled") is False
            and agent_status(admin_api, "d", namespace).get("phase") == "OwnerInactive"
        ),
        60,
        what="spec.enabled false written by the operator",
    )
    admin_api.delete("AgentModel", model)


def test_a_calendar_slot_fires_once(
    admin_api: Achilles, operator: OperatorProcess, journal: Engine, namespace: str
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    slot = (datetime.now(UTC) + timedelta(seconds=70)).replace(second=0, microsecond=0)
    schedule = {"type": "calendar", "cadence": "daily", "time": slot.strftime("%H:%M")}
    admin_api.create(
        agent("cal", owner=new_owner(journal), model=model, schedule=schedule), namespace
    )
    status = wait_for(
        lambda: (s := agent_status(admin_api, "cal", namespace)).get("nextRunAt") and s,
        60,
        what="a next slot",
    )
    assert datetime.fromisoformat(status["nextRunAt"].replace("Z", "+00:00")) == slot
    agent_id = status["databaseId"]
    run = wait_for(
        lambda: (
            journal_rows(
                journal,
                "SELECT id, trigger, scheduled_for FROM agent_runs WHERE agent_id = :a",
                a=agent_id,
            )
            or [None]
        )[0],
        150,
        what="the slot's run",
    )
    assert run.trigger == "scheduled"
    assert run.scheduled_for == slot
    wait_for(
        lambda: f"achilles-run-{run.id}" in [j.metadata.name for j in run_jobs(operator.cluster)],
        30,
        what="its Job",
    )
    status = wait_for(
        lambda: (
            (s := agent_status(admin_api, "cal", namespace)).get("nextRunAt") != status["nextRunAt"]
            and s
        ),
        30,
        what="the next day's slot",
    )
    assert datetime.fromisoformat(status["nextRunAt"].replace("Z", "+00:00")) == slot + timedelta(
        days=1
    )
    assert (
        len(journal_rows(journal, "SELECT id FROM agent_runs WHERE agent_id = :a", a=agent_id)) == 1
    )
    admin_api.delete("Agent", "cal", namespace)
    admin_api.delete("AgentModel", model)


def test_a_frozen_runner_is_reaped_stale_and_writes_nothing_after(
    admin_api: Achilles, operator: OperatorProcess, journal: Engine, namespace: str
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    admin_api.create(agent("frozen", owner=new_owner(journal), model=model), namespace)
    status = wait_for(
        lambda: (s := agent_status(admin_api, "frozen", namespace)).get("databaseId") and s,
        60,
        what="a row",
    )
    value = format_run_request(datetime.now(UTC))
    admin_api.patch(
        "Agent", "frozen", {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
    )
    run = wait_for(
        lambda: (
            journal_rows(
                journal,
                "SELECT id FROM agent_runs WHERE agent_id = :a AND state = 'running'",
                a=status["databaseId"],
            )
            or [None]
        )[0],
        60,
        what="the run to be running",
    )
    pid = wait_for(lambda: runner_pid(run.id, operator.release), 30, what="the runner process")
    os.kill(pid, signal.SIGSTOP)
    try:
        reaped = wait_for(
            lambda: (
                journal_rows(
                    journal,
                    "SELECT reason, error FROM agent_runs WHERE id = :r AND state = 'failed'",
                    r=run.id,
                )
                or [None]
            )[0],
            STALE_AFTER_SECONDS * 10,
            what="the frozen run to be reaped",
        )
        assert reaped.reason == "stale"
        wait_for(
            lambda: (
                f"achilles-run-{run.id}"
                not in [j.metadata.name for j in run_jobs(operator.cluster)]
            ),
            30,
            what="its Job deleted",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    # Resumed, the runner finds its row reaped (every write is guarded) and ends.
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, what="the resumed runner to end")
    rows = journal_rows(
        journal, "SELECT state, reason FROM agent_runs WHERE agent_id = :a", a=status["databaseId"]
    )
    assert [(r.state, r.reason) for r in rows] == [("failed", "stale")]


def test_a_lock_closed_on_a_waiting_run_refuses_the_request_and_leaves_no_row(
    cluster: Cluster,
    admin_api: Achilles,
    operator: OperatorProcess,
    journal: Engine,
    namespace: str,
) -> None:
    """Issue 18, item 4 (seed 000: a closed lock leaves no trace in the journal). A run
    waiting behind the cap whose agent is switched off never started: its row goes, no
    `failed` run appears, and `run-now --wait` says the request was refused (exit 3)."""
    model = f"m-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model))
    owner = new_owner(journal)
    # AgentPlatform/default is the release's: change it as Helm would.
    admin_api.apply_platform_as_helm(maxConcurrency=1)
    waiter: subprocess.Popen[str] | None = None
    try:
        wait_for(
            lambda: journal_rows(
                journal, "SELECT 1 FROM platform_settings WHERE agent_max_concurrency = 1"
            ),
            180,  # also the operator's start-up, when this test runs first
            what="the cap of one in the journal",
        )
        admin_api.create(agent("busy", owner=owner, model=model), namespace)
        admin_api.create(agent("waits", owner=owner, model=model), namespace)
        busy = wait_for(
            lambda: (s := agent_status(admin_api, "busy", namespace)).get("phase") == "Ready" and s,
            60,
            what="busy Ready",
        )
        waits = wait_for(
            lambda: (
                (s := agent_status(admin_api, "waits", namespace)).get("phase") == "Ready" and s
            ),
            60,
            what="waits Ready",
        )
        value = format_run_request(datetime.now(UTC))
        admin_api.patch(
            "Agent", "busy", {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
        )
        wait_for(
            lambda: journal_rows(
                journal,
                "SELECT 1 FROM agent_runs WHERE agent_id = :a AND state = 'running'",
                a=busy["databaseId"],
            ),
            60,
            what="busy's run holding the only slot",
        )
        waiter = subprocess.Popen(
            [sys.executable, "-m", "achilles", "run-now", f"{namespace}/waits", "--wait",
             "--timeout", "120"],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        wait_for(
            lambda: journal_rows(
                journal,
                "SELECT 1 FROM agent_runs WHERE agent_id = :a AND state = 'queued'"
                " AND dispatched_at IS NULL",
                a=waits["databaseId"],
            ),
            60,
            what="the requested run waiting behind the cap",
        )
        admin_api.patch("Agent", "waits", {"spec": {"enabled": False}}, namespace)
        stdout, stderr = waiter.communicate(timeout=150)
        assert waiter.returncode == 3, (stdout, stderr, operator.log())
        assert "refused: run refused: the owner switched the agent off" in stderr
        assert (
            journal_rows(
                journal, "SELECT 1 FROM agent_runs WHERE agent_id = :a", a=waits["databaseId"]
            )
            == []
        )
        status = agent_status(admin_api, "waits", namespace)
        assert status["withdrawnRunRequest"]["message"].startswith("run refused: ")
        # No failure the user did not cause: the status writer drops the queued run too.
        wait_for(
            lambda: agent_status(admin_api, "waits", namespace).get("lastRun") is None,
            30,
            what="no last run on the status",
        )
    finally:
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
        admin_api.apply_platform_as_helm(maxConcurrency=4)
        admin_api.delete("Agent", "busy", namespace)
        admin_api.delete("Agent", "waits", namespace)
        admin_api.delete("AgentModel", model)
