"""Notifications end to end (issue 22): the chart's CRDs and AgentPlatform, the operator as
a real process, the real `achilles runner` as the Job's pod (on the session's
real node), and a real HTTP receiver that checks the signature as a portal would.

- A run whose model cannot be reached fails, and its failure arrives at the webhook
  signed with the Secret the AgentPlatform names, carrying the delivery id the outbox
  holds.
- An owner whose run spends past 95 % of the weekly budget gets, on their Agent, both
  thresholds' Events and the BudgetWarning condition, and at the webhook one notification
  per threshold.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client
from sqlalchemy import text
from sqlalchemy.engine import Engine

from achilles.k8s.annotations import RUN_REQUESTED_AT
from achilles_dev.webhook_receiver import ReceivedRequest, WebhookReceiver
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import (
    RUNS_NAMESPACE,
    model_server,
    new_owner,
    running_operator,
    wait_status,
)
from tests.crd_cases import agent, agent_model
from tests.waiting import WaitTimeout, wait_for

pytestmark = pytest.mark.cluster

SECRET = b"portal-and-engine-share-this-one"
SECRET_NAME = "achilles-webhook-test"


@pytest.fixture
def receiver(cluster: Cluster, admin_api: Achilles, journal: Engine) -> Iterator[WebhookReceiver]:
    """A receiver, its signing Secret in the runs namespace, and the AgentPlatform naming
    both (as Helm would set them: the release owns the platform)."""
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET_NAME),
        data={"secret": base64.b64encode(SECRET).decode()},
    )
    cluster.core.create_namespaced_secret(RUNS_NAMESPACE, secret)
    with WebhookReceiver(SECRET) as server:
        hook = {"webhookUrl": server.url, "secretRef": {"name": SECRET_NAME}}
        admin_api.patch(
            "AgentPlatform", "default", {"spec": {"notifications": hook}}, field_manager="helm"
        )
        try:
            yield server
        finally:
            admin_api.patch(
                "AgentPlatform", "default", {"spec": {"notifications": None}}, field_manager="helm"
            )
            cluster.core.delete_namespaced_secret(SECRET_NAME, RUNS_NAMESPACE)


def test_a_failed_run_arrives_at_the_webhook_signed(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    receiver: WebhookReceiver,
    namespace: str,
    tmp_path: Path,
) -> None:
    model = f"unreachable-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(model, baseURL="http://127.0.0.1:1/v1"))
    try:
        with running_operator(cluster, achilles_release, tmp_path / "operator.log") as operator:
            wait_for(
                lambda: _webhook_in_settings(journal) == receiver.url,
                60,
                what="the operator to mirror the AgentPlatform's webhook",
            )
            admin_api.create(agent("failing", owner=new_owner(journal), model=model), namespace)
            wait_status(
                admin_api, "failing", namespace, lambda s: s.get("phase") == "Ready", "Ready"
            )
            asked = datetime.now(UTC).isoformat()
            admin_api.patch(
                "Agent",
                "failing",
                {"metadata": {"annotations": {RUN_REQUESTED_AT: asked}}},
                namespace,
            )

            def failure() -> ReceivedRequest | None:
                return next((r for r in receiver.requests() if r.event == "run.failed"), None)

            try:
                request = wait_for(failure, 180, what="the run's failure at the webhook")
            except WaitTimeout:
                pytest.fail(f"no run.failed at the webhook; operator log:\n{operator.log()}")
    finally:
        admin_api.delete("AgentModel", model)
    assert (request.status, request.signature_error) == (204, None)
    assert request.body is not None
    data = request.body["data"]
    assert data["agent"]["resource"] == "failing"
    assert data["agent"]["namespace"] == namespace
    assert (data["run"]["state"], data["run"]["reason"]) == ("failed", "error")
    with journal.begin() as conn:
        row = conn.execute(
            text(
                "SELECT delivery_id::text, state FROM notification_outbox"
                " WHERE payload->'run'->>'id' = :run"
            ),
            {"run": str(data["run"]["id"])},
        ).one()
    assert row.delivery_id == request.delivery_id == request.body["id"]
    wait_for(lambda: _state(journal, row.delivery_id) == "delivered", 30, what="the row delivered")


def _webhook_in_settings(journal: Engine) -> str | None:
    with journal.begin() as conn:
        url = conn.execute(text("SELECT agent_webhook_url FROM platform_settings")).scalar_one()
    return None if url is None else str(url)


def _state(journal: Engine, delivery_id: str) -> str:
    with journal.begin() as conn:
        state = conn.execute(
            text("SELECT state FROM notification_outbox WHERE delivery_id::text = :d"),
            {"d": delivery_id},
        ).scalar_one()
    return str(state)


def test_an_owner_past_the_budget_thresholds_is_warned_on_each_agent_once(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    journal: Engine,
    receiver: WebhookReceiver,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A run that spends past 95 % of a small weekly budget: the budget-warnings pass gives
    the owner's Agent both thresholds' Events and the BudgetWarning condition, and the
    webhook one notification per threshold."""
    owner = new_owner(journal)
    admin_api.apply_platform_as_helm(weeklyTokenBudget=10)
    model = f"demo-{uuid.uuid4().hex[:6]}"
    try:
        with (
            model_server(cluster) as demo,
            running_operator(cluster, achilles_release, tmp_path / "operator.log") as operator,
        ):
            admin_api.create(agent_model(model, baseURL=demo.base_url))
            admin_api.create(agent("spender", owner=owner, model=model), namespace)
            wait_status(
                admin_api, "spender", namespace, lambda s: s.get("phase") == "Ready", "Ready"
            )
            asked = datetime.now(UTC).isoformat()
            admin_api.patch(
                "Agent",
                "spender",
                {"metadata": {"annotations": {RUN_REQUESTED_AT: asked}}},
                namespace,
            )
            try:
                status = wait_status(
                    admin_api,
                    "spender",
                    namespace,
                    lambda s: any(
                        c.get("type") == "BudgetWarning" and c.get("reason") == "BudgetAt95Percent"
                        for c in s.get("conditions") or []
                    ),
                    "the BudgetWarning condition",
                    timeout=240,
                )
            except WaitTimeout:
                pytest.fail(f"no BudgetWarning; operator log:\n{operator.log()}")

            def warned() -> list[ReceivedRequest] | None:
                found = [
                    r
                    for r in receiver.accepted()
                    if r.event == "budget.threshold_crossed"
                    and r.body is not None
                    and r.body["data"]["owner"] == owner
                ]
                return found if len(found) == 2 else None

            notified = wait_for(warned, 60, what="both thresholds at the webhook")
    finally:
        admin_api.apply_platform_as_helm(weeklyTokenBudget=200000)
        admin_api.delete("AgentModel", model)
    assert status["weeklyTokens"]["used"] >= 10
    thresholds = sorted(r.body["data"]["budget"]["thresholdPercent"] for r in notified if r.body)
    assert thresholds == [80, 95]
    assert all(r.signature_error is None for r in notified)
    events = [
        e
        for e in cluster.core.list_namespaced_event(namespace).items
        if e.reason == "BudgetThresholdCrossed" and e.involved_object.name == "spender"
    ]
    messages = [e.message or "" for e in events]
    assert sorted(("80 %" in m, "95 %" in m) for m in messages) == [
        (False, True),
        (True, False),
    ]
