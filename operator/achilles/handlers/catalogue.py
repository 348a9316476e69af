"""AgentModel, AgentTool and AgentPlatform handlers: mirror into the tables, report status.

Each kind's list+watch (catalogue_watch.py) puts what the reconcile reads (a
`CatalogueEvent`) on the catalogue's workqueue, keyed by kind and name. The queue's
threads (`THREADS`, started by manager.py) reconcile it (`handle_queued`), one thread
per object at a time; a failure (the database or the API server down) is the queue's
rate-limited re-add of the object, read afresh from the API server when its backoff is
over and handled as a listed object (as deleted when it is gone).

Every MCP listing is this handler's, on the queue's threads: at a new spec, at a retry,
and when the sweeper's relist pass puts each source on the queue to be listed again
(controllers/mcp_listings.py); keyed, a source is listed by one thread at a time, each
listing reading the status the one before wrote. An MCP AgentTool whose server did not
answer (Ready False/ServerUnreachable) is listed again through the queue's rate-limited
re-add (1 s doubling to 60 s), until a listing works and the key is forgotten: a server
started a moment after its AgentTool shows its tools within about as long as it was
down (a minute at most), not at the next relist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from achilles.db.database import Database
from achilles.domain.agent_status import condition, invalid_spec_message, needs_patch
from achilles.domain.mcp_tools import listing_retried
from achilles.domain.vocabulary import ConditionReason, ConditionType
from achilles.handlers import metrics
from achilles.handlers.agent_queue import QueuedAgent, requeue_agents
from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueKey,
    CatalogueToRead,
    QueuedCatalogue,
    catalogue_key,
)
from achilles.handlers.discovery import report_discovery
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.signals import Happened
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_platform import SINGLETON_NAME, AgentPlatformSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.resources.kinds import AGENT_MODEL, AGENT_PLATFORM, AGENT_TOOL
from achilles.runtime.workqueue import WorkQueue
from achilles.services import catalogue, mcp_sources

SpecT = TypeVar("SpecT", bound=BaseModel)

log = logging.getLogger("achilles.operator")

# The catalogue's threads: its kinds are few and their events rare, but an MCP tool's
# listing may take its server's timeout, and a model's event should not wait for it.
# The relist pass puts every MCP source on this queue at once: with several servers down,
# both threads may list for their timeouts in turn and a model's event waits behind them
# (a relist every 300 s by default; each listing's timeout is its AgentTool's).
THREADS = 2
TAKE_SECONDS = 1.0
RECONCILE = "catalogue_reconcile"


class Reconciled(Enum):
    """What a reconcile leaves to its key on the queue (None is DONE)."""

    DONE = "done"  # forget the key's backoff and any retry still waiting
    # An MCP AgentTool's status says its server did not answer: keep a listing retry
    # waiting (add one, with the key's backoff, unless one waits already).
    LISTING_OWED = "listing owed"


@dataclass(frozen=True)
class CatalogueReconciler:
    """The catalogue's reconcile, with exactly what it uses (handlers/manager.py builds
    it for the workqueue's threads): the journal's database, the API server (the object
    read afresh, its status and Events, an MCP source's Secret), the namespace of the
    MCP sources' Secrets (the runs'), its own workqueue (a failure's re-add, a listing
    owed), the Agent workqueue (the Agents a model or tool changed, read again) and
    `emit` (the platform changed)."""

    database: Database
    resources: Resources
    namespace: str
    queue: WorkQueue[CatalogueKey, QueuedCatalogue]
    agent_queue: WorkQueue[str, QueuedAgent]
    emit: Callable[[Happened], None]


class Mirror:
    """One event of a cluster-scoped kind: parse the spec, then report how mirroring went."""

    def __init__(
        self,
        resources: Resources,
        ref: ObjectRef,
        meta: Mapping[str, Any],
        status: Mapping[str, Any],
    ):
        self.resources = resources
        self.ref = ref
        self.generation = meta.get("generation")
        self.previous = dict(status)
        self.now = datetime.now(UTC)

    def parse(self, model: type[SpecT], spec: Mapping[str, Any]) -> SpecT | None:
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
            patched = self.resources.patch_status(self.ref, desired)
            metrics.count_status_patch("catalogue", patched)


def _deleted(type: str | None, meta: Mapping[str, Any]) -> bool:
    return type == "DELETED" or bool(meta.get("deletionTimestamp"))


def handle_queued(reconciler: CatalogueReconciler, queued: QueuedCatalogue) -> None:
    """Reconcile what was taken from the catalogue's workqueue, on one of its threads. A
    failure is the queue's rate-limited re-add of the object, read afresh when its
    backoff is over; a success forgets it, unless it owes an MCP listing."""
    ref = queued.ref
    key = catalogue_key(ref)
    queue = reconciler.queue
    try:
        event = _event_of(reconciler, queued)
        reconciled = RECONCILERS[ref.kind](reconciler, event)
    except Exception as exc:
        delay = queue.add_rate_limited(key, CatalogueToRead(ref, relist=queued.relist))
        log.warning(
            "%s of %s %s failed (%s); retried in %.0f s", RECONCILE, ref.kind, ref.name, exc, delay
        )
        return
    if reconciled is not Reconciled.LISTING_OWED:
        queue.forget(key)
    elif not queue.retrying(key) and not queue.waiting(key):
        # A handling of this key waiting (an event, a retry due) decides again; else
        # this one asks for the listing. The echo of the failure's own status write finds
        # the retry waiting and adds none, so one failure is one re-add.
        delay = queue.add_rate_limited(key, CatalogueToRead(ref, relist=True))
        log.info("%s %s: its MCP server did not answer; listed again in %.0f s", ref.kind,
                 ref.name, delay)  # fmt: skip


def _event_of(reconciler: CatalogueReconciler, queued: QueuedCatalogue) -> CatalogueEvent:
    if isinstance(queued, CatalogueEvent):
        return queued
    ref = queued.ref
    body = reconciler.resources.read_object(ref)
    if body is None:  # gone meanwhile: handled as its deletion
        return CatalogueEvent(ref, "DELETED", {"name": ref.name, "uid": ref.uid}, {}, {})
    # As a listed object: reconciled in full.
    meta = body.get("metadata") or {}
    spec, status = body.get("spec") or {}, body.get("status") or {}
    return CatalogueEvent(ref, None, dict(meta), spec, status, relist=queued.relist)


def model_changed(reconciler: CatalogueReconciler, event: CatalogueEvent) -> None:
    type, meta, spec, status, logger = event.type, event.meta, event.spec, event.status, log
    name = meta["name"]
    if _deleted(type, meta):
        stopped = catalogue.withdraw_model(reconciler.database, name, uid=meta.get("uid"))
        logger.info("model %s withdrawn from %d agent(s)", name, len(stopped))
        # Clear their spec.model (the owner must choose again); what a failure leaves
        # undelivered stays owed in the database and the sweeper finishes it.
        deliver_owed_specs(reconciler)
        return
    ref = ObjectRef(AGENT_MODEL.kind, AGENT_MODEL.plural, name)
    mirror = Mirror(reconciler.resources, ref, meta, status)
    parsed = mirror.parse(AgentModelSpec, spec)
    if parsed is None:
        return
    mirrored = catalogue.mirror_model(reconciler.database, name, parsed, uid=meta.get("uid"))
    if mirrored.withdrawn:
        # The model of this name was deleted while no operator watched, and this is a new
        # one: its agents were withdrawn from the old (seed 000: nobody revives).
        logger.info(
            "model %s was deleted and created again unseen: withdrawn from %d agent(s)",
            name,
            len(mirrored.withdrawn),
        )
        deliver_owed_specs(reconciler)
    # Reconciled before this model existed: read again through the Agent workqueue,
    # which links the ones that name it.
    requeue_agents(reconciler.agent_queue, mirrored.awaiting)
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
        patched = reconciler.resources.patch_status(
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


def tool_changed(reconciler: CatalogueReconciler, event: CatalogueEvent) -> Reconciled:
    type, meta, spec, status, logger = event.type, event.meta, event.spec, event.status, log
    name = meta["name"]
    if _deleted(type, meta):
        # Its links go; the agents that had them still name it: read again, they show
        # it unknown (ToolsResolved False) and link to it if it is created again.
        unlinked = catalogue.remove_tool(reconciler.database, name, uid=meta.get("uid"))
        requeue_agents(reconciler.agent_queue, unlinked)
        logger.info("tool %s removed: %d agent(s) linked to it read again", name, len(unlinked))
        return Reconciled.DONE
    ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name)
    mirror = Mirror(reconciler.resources, ref, meta, status)
    parsed = mirror.parse(AgentToolSpec, spec)
    if parsed is None:
        return Reconciled.DONE
    mirrored = catalogue.mirror_tool(reconciler.database, name, parsed, uid=meta.get("uid"))
    # Linked to an older object of this name, deleted unseen: read again, they link to
    # this one as to any new tool.
    requeue_agents(reconciler.agent_queue, mirrored.unlinked)
    # Reconciled while no tool of this name existed: read again, they link to it.
    requeue_agents(reconciler.agent_queue, mirrored.awaiting)
    if mirrored.awaiting:
        logger.info(
            "tool %s created: %d agent(s) naming it read again", name, len(mirrored.awaiting)
        )
    if parsed.mcp is not None:
        # List the server's tools when the spec is new to the status, or when a retry
        # says to (its own status writes come back as events: they must not list again,
        # but while the status says the server did not answer, a retry stays owed).
        if not event.relist and mirror.previous.get("observedGeneration") == mirror.generation:
            return _owed(_ready_reason(mirror.previous))
        secrets = mcp_sources.secret_reader(reconciler.resources.core, reconciler.namespace)
        discovery = mcp_sources.discover(reconciler.database, secrets, name)
        if discovery is None:
            return Reconciled.DONE
        report_discovery(
            reconciler, ref, mirror.generation, mirror.previous, discovery, mirrored.tool_id
        )
        return _owed(discovery.reason)
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
    return Reconciled.DONE


def _ready_reason(status: Mapping[str, Any]) -> str | None:
    for found in status.get("conditions") or []:
        if found.get("type") == ConditionType.READY:
            return str(found.get("reason"))
    return None


def _owed(reason: str | None) -> Reconciled:
    return Reconciled.LISTING_OWED if listing_retried(reason) else Reconciled.DONE


def platform_changed(reconciler: CatalogueReconciler, event: CatalogueEvent) -> None:
    type, meta, spec, status = event.type, event.meta, event.spec, event.status
    if meta["name"] != SINGLETON_NAME or _deleted(type, meta):
        return  # deleting the settings keeps the last ones; admission refuses other names
    ref = ObjectRef(AGENT_PLATFORM.kind, AGENT_PLATFORM.plural, SINGLETON_NAME)
    mirror = Mirror(reconciler.resources, ref, meta, status)
    parsed = mirror.parse(AgentPlatformSpec, spec)
    if parsed is None:
        return
    catalogue.mirror_platform(reconciler.database, parsed)
    reconciler.emit(Happened.PLATFORM_CHANGED)  # the zone may move slots, the cap grow
    mirror.write(
        [
            mirror.condition(
                ConditionType.READY, True, ConditionReason.MIRRORED, "in platform_settings"
            )
        ]
    )


# Each kind's reconcile.
RECONCILERS: dict[str, Callable[[CatalogueReconciler, CatalogueEvent], Reconciled | None]] = {
    AGENT_MODEL.kind: model_changed,
    AGENT_TOOL.kind: tool_changed,
    AGENT_PLATFORM.kind: platform_changed,
}
