"""An owner's agent asks before a write, and the approved call is made exactly once,
end to end (issue 38): the chart's CRDs, the real operator process, Jobs on the session's
real node (the runner image), the offline model server scripted to call the tool, the
registry's `@modelcontextprotocol/server-memory` (on every interface of this machine, so
the runs reach it where they reach the model server).

kubectl-style: an AgentTool naming the server, an Agent picking it; a manual run asks the
owner (the run ends waiting, the call is not made); `achilles inbox approve` wakes the
agent through its Agent resource; the woken run, a Job of its own, makes the call once
(the server's own memory file shows it once); a later run never makes it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import Engine

from achilles.k8s.annotations import RUN_REQUESTED_AT, format_run_request
from achilles_dev.mcp_servers import McpServer
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    OperatorProcess,
    journal_rows,
    model_server,
    new_owner,
    running_operator,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TOOL = "memory"
CREATE = f"{TOOL}__create_entities"
ARGUMENTS = {"entities": [{"name": "Grace", "entityType": "person", "observations": ["x"]}]}


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, achilles_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("mcp-flow") / "operator.log"
    with running_operator(cluster, achilles_release, log) as process:
        yield process


def _pods_url(cluster: Cluster, server: McpServer) -> str:
    """The server's endpoint where the cluster's pods (the runs) and the operator reach it."""
    return f"http://{cluster.host_address}:{server.port}/mcp"


def _entities(server: McpServer) -> list[str]:
    assert server.state is not None
    if not server.state.exists():
        return []
    lines = [json.loads(line) for line in server.state.read_text().splitlines() if line.strip()]
    return [line["name"] for line in lines if line.get("type") == "entity"]


def _script(path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "rules": [
                    {
                        "when": {"turn": 0, "contains": "Approvals decided"},
                        "reply": {"content": "${last_user}"},
                    },
                    {
                        "when": {"turn": 0, "tools_offered": [CREATE]},
                        "reply": {
                            "tool_calls": [
                                {
                                    "name": CREATE,
                                    "arguments": {**ARGUMENTS, "reason_for_owner": "remember"},
                                }
                            ]
                        },
                    },
                    {"reply": {"content": "nothing to do: ${tools}"}},
                ]
            }
        )
    )
    return path


def _request(admin_api: Achilles, name: str, namespace: str) -> str:
    value = format_run_request(datetime.now(UTC))
    admin_api.patch(
        "Agent", name, {"metadata": {"annotations": {RUN_REQUESTED_AT: value}}}, namespace
    )
    return value


def _output(journal: Engine, run_id: int) -> str:
    ((output,),) = journal_rows(journal, "SELECT output FROM agent_runs WHERE id = :i", i=run_id)
    return str(output)


def test_a_write_is_asked_approved_in_the_inbox_and_made_once(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    journal: Engine,
    namespace: str,
    mcp_memory: McpServer,
    tmp_path: Path,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    with model_server(cluster, _script(tmp_path / "script.yaml")) as server:
        admin_api.create(agent_model(model, baseURL=server.base_url))
        admin_api.apply(
            {
                "apiVersion": "achilles.io/v1alpha1",
                "kind": "AgentTool",
                "metadata": {"name": TOOL},
                "spec": {"implementation": "mcp", "mcp": {"url": _pods_url(cluster, mcp_memory)}},
            }
        )
        try:
            wait_for(
                lambda: (admin_api.get("AgentTool", TOOL).get("status") or {}).get("toolCount"),
                60,
                what="the memory server's tools listed",
            )
            owner = new_owner(journal)
            admin_api.create(agent("rememberer", owner=owner, model=model, tools=[TOOL]), namespace)
            wait_status(admin_api, "rememberer", namespace, lambda s: s.get("databaseId"), "a row")

            _request(admin_api, "rememberer", namespace)
            asked = wait_status(
                admin_api, "rememberer", namespace,
                lambda s: (s.get("lastRun") or {}).get("state") == "succeeded",
                "the asking run to end", timeout=120,
            )  # fmt: skip
            assert _output(journal, asked["lastRun"]["id"]).startswith(
                f"Waiting for the owner's approval of {CREATE}"
            ), operator.log()
            assert "Grace" not in _entities(mcp_memory)
            ((item_id, state),) = journal_rows(
                journal,
                "SELECT item_id, state FROM tool_approvals WHERE agent_id = :a",
                a=asked["databaseId"],
            )
            assert state == "pending"

            done = subprocess.run(
                [sys.executable, "-m", "achilles", "inbox", "approve", str(item_id), "--json"],
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
            assert json.loads(done.stdout)["wake"]["requested"] is True, done.stdout

            made = wait_status(
                admin_api, "rememberer", namespace,
                lambda s: (s.get("lastRun") or {}).get("id", 0) > asked["lastRun"]["id"]
                and s["lastRun"]["state"] == "succeeded",
                "the woken run to end", timeout=120,
            )  # fmt: skip
            assert _entities(mcp_memory).count("Grace") == 1
            note = json.loads(_output(journal, made["lastRun"]["id"]).splitlines()[1])
            assert (note["tool"], note["outcome"]) == (CREATE, "executed")
            rows = journal_rows(
                journal,
                "SELECT state, executed_by_run_id FROM tool_approvals WHERE item_id = :i",
                i=item_id,
            )
            assert [tuple(row) for row in rows] == [("executed", made["lastRun"]["id"])]
        finally:
            admin_api.delete("AgentTool", TOOL)
            admin_api.delete("AgentModel", model)
