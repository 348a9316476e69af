"""Catalogue objects are tracked by uid (issue 36 item 8), on the real control plane with
`achilles operator` as a real process: an AgentModel deleted and created again under its
name while the operator is down is a new model, so its agents are withdrawn from the old
one when the operator starts (`spec.model` cleared, phase NoModel, a `ModelWithdrawn`
Event), as for a model deleted unseen; re-created, it revives nobody (seed 000)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from sqlalchemy.engine import Engine

from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    agent_spec,
    journal_rows,
    new_owner,
    running_operator,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def _model_uid(journal: Engine, name: str) -> str | None:
    rows = journal_rows(journal, "SELECT cr_uid FROM agent_models WHERE name = :m", m=name)
    return str(rows[0].cr_uid) if rows and rows[0].cr_uid else None


def test_a_model_deleted_and_created_again_while_the_operator_is_down_stops_its_agents(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    namespace: str,
    tmp_path: Path,
) -> None:
    model = f"m-{uuid.uuid4().hex[:6]}"
    with running_operator(cluster, achilles_release, tmp_path / "before.log"):
        first = admin_api.create(agent_model(model))
        wait_for(
            lambda: _model_uid(journal, model) == first["metadata"]["uid"],
            60,
            what="the model mirrored with its uid",
        )
        admin_api.create(agent("uses", owner=new_owner(journal), model=model), namespace)
        wait_status(admin_api, "uses", namespace, lambda s: s.get("phase") == "Ready", "Ready")
    # No operator watches: the model goes and comes back under its name, a new object.
    admin_api.delete("AgentModel", model)

    def gone() -> bool:
        try:
            admin_api.get("AgentModel", model)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    wait_for(gone, 30, what="the AgentModel gone", interval=0.2)
    second = admin_api.create(agent_model(model))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    with running_operator(cluster, achilles_release, tmp_path / "after.log") as operator:
        status = wait_status(
            admin_api,
            "uses",
            namespace,
            lambda s: s.get("phase") == "NoModel",
            f"NoModel ({operator.log()})",
            timeout=240,
        )
        assert status.get("nextRunAt") is None
        wait_for(
            lambda: "model" not in agent_spec(admin_api, "uses", namespace),
            60,
            what="spec.model cleared",
        )
        assert _model_uid(journal, model) == second["metadata"]["uid"]
        assert journal_rows(journal, "SELECT model_id FROM agents WHERE cr_name = 'uses'") == [
            (None,)
        ]
    admin_api.delete("AgentModel", model)
