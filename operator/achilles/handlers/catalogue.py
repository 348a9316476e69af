"""AgentModel, AgentTool and AgentPlatform handlers: mirror into the tables, report status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from achilles.domain.vocabulary import ConditionReason, ConditionType
from achilles.handlers import metrics
from achilles.handlers.agent_queue import requeue_agents
from achilles.handlers.context import RuntimeContext
from achilles.handlers.discovery import report_discovery
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.retries import context_of, retried
from achilles.handlers.signals import Happened
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_platform import SINGLETON_NAME, AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT_MODEL, AGENT_PLATFORM, AGENT_TOOL
from achilles.services import catalogue, mcp_sources
from achilles.services.status import condition, invalid_spec_message, needs_patch

SpecT = TypeVar("SpecT", bound=BaseModel)


class Mirror:
    """One event of a cluster-scoped kind: parse the spec, then report how mirroring went."""

    def __init__(
        self, context: RuntimeContext, ref: ObjectRef, meta: kopf.Meta, status: kopf.Status
    ):
        self.context = context
        self.ref = ref
        self.generation = meta.get("generation")
        self.previous = dict(status)
        self.now = datetime.now(UTC)

    def parse(self, model: type[SpecT], spec: kopf.Spec) -> SpecT | None:
        """The spec, or None after reporting why it is invalid (admission should have
        refused it; say so on the object rather than crash-loop)."""
        try:
            return model.model_validate(dict(spec))
        except ValidationError as exc:
            self.write(
                [
                    self.condition(
                        ConditionType.READY,
                        False,
                        ConditionReason.INVALID_SPEC,
                        invalid_spec_message(exc),
                    )
                ]
            )
            return None

    def condition(self, kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        previous = self.previous.get("conditions")
        return condition(kind, ok, reason, message, previous, self.now, self.generation)

    def write(self, conditions: list[dict[str, Any]], **fields: Any) -> None:
        desired = {"observedGeneration": self.generation, "conditions": conditions, **fields}
        if needs_patch(self.previous, desired):
            patched = self.context.resources.patch_status(self.ref, desired)
            metrics.count_status_patch("catalogue", patched)


def _deleted(type: str, meta: kopf.Meta) -> bool:
    return type == "DELETED" or bool(meta.get("deletionTimestamp"))


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_MODEL.plural)
@retried(AGENT_MODEL)
def model_changed(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    context = context_of(memo)
    name = meta["name"]
    if _deleted(type, meta):
        stopped = catalogue.withdraw_model(context.database, name, uid=meta.get("uid"))
        logger.info("model %s withdrawn from %d agent(s)", name, len(stopped))
        # Clear their spec.model (the owner must choose again); what a failure leaves
        # undelivered stays owed in the database and the sweeper finishes it.
        deliver_owed_specs(context)
        return
    mirror = Mirror(context, ObjectRef(AGENT_MODEL.kind, AGENT_MODEL.plural, name), meta, status)
    parsed = mirror.parse(AgentModelSpec, spec)
    if parsed is None:
        return
    mirrored = catalogue.mirror_model(context.database, name, parsed, uid=meta.get("uid"))
    if mirrored.withdrawn:
        # The model of this name was deleted while no operator watched, and this is a new
        # one: its agents were withdrawn from the old (seed 000: nobody revives).
        logger.info(
            "model %s was deleted and created again unseen: withdrawn from %d agent(s)",
            name,
            len(mirrored.withdrawn),
        )
        deliver_owed_specs(context)
    # Reconciled before this model existed: read again by the sweeper's next retries
    # pass, which links the ones that name it.
    requeue_agents(context.agent_queue, mirrored.awaiting)
    if mirrored.awaiting:
        logger.info(
            "model %s created: %d agent(s) without a model read again", name, len(mirrored.awaiting)
        )
    conditions = [
        mirror.condition(ConditionType.READY, True, ConditionReason.MIRRORED, "in the allowlist")
    ]
    if mirrored.default_conflict is not None:
        # Admission allows one default, but two simultaneous creates can both pass it.
        other = mirrored.default_conflict
        conditions.append(
            mirror.condition(
                ConditionType.DEFAULT_CONFLICT,
                False,
                ConditionReason.TWO_DEFAULTS,
                f"two default models: {other} already is the default;"
                " set spec.default: false on one of them",
            )
        )
        patched = context.resources.patch_status(
            ObjectRef(AGENT_MODEL.kind, AGENT_MODEL.plural, other),
            {
                "conditions": [
                    mirror.condition(
                        ConditionType.READY, True, ConditionReason.MIRRORED, "in the allowlist"
                    ),
                    mirror.condition(
                        ConditionType.DEFAULT_CONFLICT,
                        False,
                        ConditionReason.TWO_DEFAULTS,
                        f"two default models: {name} also claims to be the default",
                    ),
                ]
            },
        )
        metrics.count_status_patch("catalogue", patched)
    mirror.write(conditions, databaseId=mirrored.model_id)


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_TOOL.plural)
@retried(AGENT_TOOL)
def tool_changed(
    type: str,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    context = context_of(memo)
    name = meta["name"]
    if _deleted(type, meta):
        # Its links go; the agents that had them still name it: read again, they show
        # it unknown (ToolsResolved False) and link to it if it is created again.
        unlinked = catalogue.remove_tool(context.database, name, uid=meta.get("uid"))
        requeue_agents(context.agent_queue, unlinked)
        logger.info("tool %s removed: %d agent(s) linked to it read again", name, len(unlinked))
        return
    ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name)
    mirror = Mirror(context, ref, meta, status)
    parsed = mirror.parse(AgentToolSpec, spec)
    if parsed is None:
        return
    mirrored = catalogue.mirror_tool(context.database, name, parsed, uid=meta.get("uid"))
    # Linked to an older object of this name, deleted unseen: read again, they link to
    # this one as to any new tool.
    requeue_agents(context.agent_queue, mirrored.unlinked)
    # Reconciled while no tool of this name existed: read again, they link to it.
    requeue_agents(context.agent_queue, mirrored.awaiting)
    if mirrored.awaiting:
        logger.info(
            "tool %s created: %d agent(s) naming it read again", name, len(mirrored.awaiting)
        )
    if parsed.mcp is not None:
        # List the server's tools when the spec is new to the status (its own status
        # writes come back as events: they must not list again).
        if mirror.previous.get("observedGeneration") == mirror.generation:
            return
        secrets = mcp_sources.secret_reader(
            context.resources.core, context.config.job_template.namespace
        )
        discovery = mcp_sources.discover(context.database, secrets, name)
        if discovery is not None:
            report_discovery(
                context, ref, mirror.generation, mirror.previous, discovery, mirrored.tool_id
            )
        return
    mirror.write(
        [
            mirror.condition(
                ConditionType.READY, True, ConditionReason.MIRRORED, "in the tool catalogue"
            )
        ],
        databaseId=mirrored.tool_id,
        source=mcp_sources.SOURCE_BUILTIN,
        toolCount=None,
        mcpTools=None,
        schemaDigest=None,
        listedAt=None,
    )


@kopf.on.event(API_GROUP, API_VERSION_NAME, AGENT_PLATFORM.plural)
@retried(AGENT_PLATFORM)
def platform_changed(
    type: str, meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, memo: kopf.Memo, **_: Any
) -> None:
    context = context_of(memo)
    if meta["name"] != SINGLETON_NAME or _deleted(type, meta):
        return  # deleting the settings keeps the last ones; admission refuses other names
    ref = ObjectRef(AGENT_PLATFORM.kind, AGENT_PLATFORM.plural, SINGLETON_NAME)
    mirror = Mirror(context, ref, meta, status)
    parsed = mirror.parse(AgentPlatformSpec, spec)
    if parsed is None:
        return
    catalogue.mirror_platform(context.database, parsed)
    context.wakes.emit(Happened.PLATFORM_CHANGED)  # the zone may move slots, the cap grow
    mirror.write(
        [
            mirror.condition(
                ConditionType.READY, True, ConditionReason.MIRRORED, "in platform_settings"
            )
        ]
    )
