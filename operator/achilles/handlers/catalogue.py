"""AgentModel, AgentTool and AgentPlatform handlers: mirror into the tables, report status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from achilles.handlers.operator import engine_of, retried
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_platform import SINGLETON_NAME, AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT, AGENT_MODEL, AGENT_PLATFORM, AGENT_TOOL
from achilles.services import catalogue
from achilles.services.status import condition, needs_patch


def _invalid(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def _write(engine: Any, ref: ObjectRef, previous: dict[str, Any], desired: dict[str, Any]) -> None:
    if needs_patch(previous, desired):
        engine.resources.patch_status(ref, desired)


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_MODEL.plural)
@retried
def model_changed(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    engine = engine_of(memo)
    name = meta["name"]
    ref = ObjectRef(AGENT_MODEL.kind, AGENT_MODEL.plural, name, None, meta["uid"])
    if type == "DELETED" or meta.get("deletionTimestamp"):
        stopped = catalogue.withdraw_model(engine.database, name)
        for agent in stopped:
            if agent.namespace and agent.name:
                # Clear spec.model: the agent stops, and the owner must choose again.
                engine.resources.patch_agent_spec(agent.namespace, agent.name, {"model": None})
                engine.resources.post_event(
                    ObjectRef(AGENT.kind, AGENT.plural, agent.name, agent.namespace, agent.uid),
                    "Warning",
                    "ModelWithdrawn",
                    f"AgentModel {name} was deleted: spec.model cleared; the agent is stopped"
                    " until its owner picks a model",
                )
        logger.info("model %s withdrawn from %d agent(s)", name, len(stopped))
        return
    previous = dict(status)
    now = datetime.now(UTC)
    try:
        parsed = AgentModelSpec.model_validate(dict(spec))
    except ValidationError as exc:
        _write(
            engine,
            ref,
            previous,
            {
                "conditions": [
                    condition(
                        "Ready",
                        False,
                        "InvalidSpec",
                        _invalid(exc),
                        previous.get("conditions"),
                        now,
                    )
                ]
            },
        )
        return
    mirrored = catalogue.mirror_model(engine.database, name, parsed)
    conditions = [
        condition(
            "Ready",
            True,
            "Mirrored",
            "in the allowlist",
            previous.get("conditions"),
            now,
            meta.get("generation"),
        )
    ]
    if mirrored.default_conflict is not None:
        message = (
            f"two default models: {mirrored.default_conflict} already is the default;"
            " set spec.default: false on one of them"
        )
        conditions.append(
            condition(
                "DefaultConflict", False, "TwoDefaults", message, previous.get("conditions"), now
            )
        )
        other = ObjectRef(AGENT_MODEL.kind, AGENT_MODEL.plural, mirrored.default_conflict)
        engine.resources.patch_status(
            other,
            {
                "conditions": [
                    condition("Ready", True, "Mirrored", "in the allowlist", None, now),
                    condition(
                        "DefaultConflict",
                        False,
                        "TwoDefaults",
                        f"two default models: {name} also claims to be the default",
                        None,
                        now,
                    ),
                ]
            },
        )
    _write(
        engine,
        ref,
        previous,
        {
            "databaseId": mirrored.model_id,
            "observedGeneration": meta.get("generation"),
            "conditions": conditions,
        },
    )


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_TOOL.plural)
@retried
def tool_changed(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    engine = engine_of(memo)
    name = meta["name"]
    if type == "DELETED" or meta.get("deletionTimestamp"):
        catalogue.remove_tool(engine.database, name)
        return
    ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name, None, meta["uid"])
    previous = dict(status)
    now = datetime.now(UTC)
    try:
        parsed = AgentToolSpec.model_validate(dict(spec))
    except ValidationError as exc:
        _write(
            engine,
            ref,
            previous,
            {
                "conditions": [
                    condition(
                        "Ready",
                        False,
                        "InvalidSpec",
                        _invalid(exc),
                        previous.get("conditions"),
                        now,
                    )
                ]
            },
        )
        return
    tool_id = catalogue.mirror_tool(engine.database, name, parsed)
    _write(
        engine,
        ref,
        previous,
        {
            "databaseId": tool_id,
            "observedGeneration": meta.get("generation"),
            "conditions": [
                condition(
                    "Ready",
                    True,
                    "Mirrored",
                    "in the tool catalogue",
                    previous.get("conditions"),
                    now,
                    meta.get("generation"),
                )
            ],
        },
    )


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_PLATFORM.plural)
@retried
def platform_changed(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    engine = engine_of(memo)
    if meta["name"] != SINGLETON_NAME or type == "DELETED" or meta.get("deletionTimestamp"):
        return  # deleting the settings keeps the last ones; admission refuses other names
    ref = ObjectRef(AGENT_PLATFORM.kind, AGENT_PLATFORM.plural, SINGLETON_NAME, None, meta["uid"])
    previous = dict(status)
    now = datetime.now(UTC)
    try:
        parsed = AgentPlatformSpec.model_validate(dict(spec))
    except ValidationError as exc:
        _write(
            engine,
            ref,
            previous,
            {
                "conditions": [
                    condition(
                        "Ready",
                        False,
                        "InvalidSpec",
                        _invalid(exc),
                        previous.get("conditions"),
                        now,
                    )
                ]
            },
        )
        return
    catalogue.mirror_platform(engine.database, parsed)
    engine.schedule_wake.set()  # the organisation's zone may have moved slots
    engine.dispatch_wake.set()  # and the cap may have grown
    _write(
        engine,
        ref,
        previous,
        {
            "observedGeneration": meta.get("generation"),
            "conditions": [
                condition(
                    "Ready",
                    True,
                    "Mirrored",
                    "in platform_settings",
                    previous.get("conditions"),
                    now,
                    meta.get("generation"),
                )
            ],
        },
    )
