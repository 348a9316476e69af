"""Agent handlers: every event makes the row, the status and run requests agree with the CR."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from achilles.domain.runs import RunState
from achilles.handlers import metrics
from achilles.handlers.operator import engine_of, retried
from achilles.k8s.annotations import RUN_REQUESTED_AT, parse_run_request
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.agent import AgentSpec
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT
from achilles.services import agents, runs
from achilles.services.status import (
    condition,
    invalid_spec_message,
    is_own_status_echo,
    journal_view,
    needs_patch,
)


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT.plural)
@retried
def agent_changed(
    type: str,
    body: kopf.Body,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    engine = engine_of(memo)
    uid, namespace, name = meta["uid"], meta["namespace"], meta["name"]
    ref = ObjectRef(AGENT.kind, AGENT.plural, name, namespace, uid)
    if is_own_status_echo(type, meta, status) and not engine.statuses.take_reconcile(
        status["databaseId"]
    ):
        return
    if type == "DELETED" or meta.get("deletionTimestamp"):
        agent_id = agents.forget_agent(engine.database, uid)
        if agent_id is not None:
            engine.written_statuses.forget(agent_id)
            engine.jobs.delete_for_agent(agent_id)
            logger.info(
                "agent %s/%s removed (row %s, its runs and Jobs)", namespace, name, agent_id
            )
        return
    previous = dict(status)
    try:
        parsed = AgentSpec.model_validate(dict(spec))
    except ValidationError as exc:
        # Admission should have refused it; say so on the object rather than crash-loop.
        problem = invalid_spec_message(exc)
        engine.resources.patch_status(
            ref,
            {
                "phase": "Invalid",
                "conditions": [
                    condition(
                        "Ready", False, "InvalidSpec", problem, previous.get("conditions"), _now()
                    )
                ],
            },
        )
        return
    obj = agents.AgentObject(
        uid=uid,
        namespace=namespace,
        name=name,
        generation=meta.get("generation"),
        spec=parsed,
        status=previous,
    )
    reconciled = agents.reconcile_agent(
        engine.database, obj, is_new=previous.get("databaseId") is None
    )
    if reconciled.spec_patch:
        engine.resources.patch_agent_spec(namespace, name, reconciled.spec_patch)
        if reconciled.spec_patch.get("enabled") is False:
            engine.resources.post_event(
                ref,
                "Normal",
                "OwnerDeactivated",
                "the owner's account is deactivated: spec.enabled set to false",
            )
        if "model" in reconciled.spec_patch:
            engine.resources.post_event(
                ref,
                "Normal",
                "DefaultModel",
                f"no model chosen: the default model {reconciled.spec_patch['model']} was given",
            )
    desired = dict(reconciled.status)
    request = parse_run_request((meta.get("annotations") or {}).get(RUN_REQUESTED_AT))
    if request is not None and request != previous.get("lastHandledRunRequest"):
        outcome = runs.handle_run_request(engine.database, uid, request)
        desired["lastHandledRunRequest"] = request
        if outcome.result is None:
            metrics.RUN_REQUESTS.labels("refused").inc()
            engine.resources.post_event(
                ref, "Warning", "RunRefused", outcome.refusal or "run refused"
            )
            desired["conditions"] = [
                *desired["conditions"],
                condition(
                    "RunRequestAccepted",
                    False,
                    "Refused",
                    outcome.refusal or "",
                    previous.get("conditions"),
                    _now(),
                ),
            ]
        elif not outcome.result.duplicate_request:
            result = outcome.result
            metrics.RUN_REQUESTS.labels(result.state).inc()
            metrics.RUNS_ENQUEUED.labels("manual", result.state, result.reason or "").inc()
            if result.state is RunState.SKIPPED:
                engine.resources.post_event(
                    ref,
                    "Normal",
                    "RunSkipped",
                    f"manual run {result.run_id} skipped: {result.reason}",
                )
            else:
                engine.resources.post_event(
                    ref,
                    "Normal",
                    "RunQueued",
                    f"manual run {result.run_id} queued (request {request})",
                )
                engine.dispatch_wake.set()
        if outcome.result is not None:
            desired["conditions"] = [
                *desired["conditions"],
                condition(
                    "RunRequestAccepted",
                    True,
                    "Accepted",
                    f"request {request} answered by run {outcome.result.run_id}",
                    previous.get("conditions"),
                    _now(),
                ),
            ]
            if reconciled.agent_id is not None:
                engine.mark_dirty([reconciled.agent_id])
    elif previous.get("conditions"):
        kept = [c for c in previous["conditions"] if c.get("type") == "RunRequestAccepted"]
        desired["conditions"] = [*desired["conditions"], *kept]
    if needs_patch(previous, desired):
        engine.resources.patch_status(ref, desired)
    if reconciled.agent_id is not None:  # the status writer patches from here on
        engine.written_statuses.record(reconciled.agent_id, journal_view(desired))


def _now() -> datetime:
    return datetime.now(UTC)
