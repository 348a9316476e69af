"""What the catalogue's workqueue holds: an event of an AgentModel, AgentTool or
AgentPlatform (the fields its handler reads), or, for a retry, the object to read afresh
(and, for an MCP AgentTool whose server did not answer, to list again). Keyed by kind and
name (the three kinds are cluster-scoped); the newest item of a key wins, as each carries
the whole object, but a relist asked for stays asked (`keep_relist`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import AGENT_MODEL, AGENT_PLATFORM, AGENT_TOOL
from achilles.runtime.synced import Synced
from achilles.runtime.workqueue import WorkQueue

CatalogueKey = tuple[str, str]  # (kind, name)
# The catalogue's kinds, each with its own list+watch (handlers/catalogue.py).
CATALOGUE_KINDS = (AGENT_MODEL, AGENT_TOOL, AGENT_PLATFORM)


@dataclass(frozen=True)
class CatalogueEvent:
    """The watch event's type (None: listed) and the object's metadata, spec and status;
    `relist`: an MCP AgentTool's server is listed even if its status is current."""

    ref: ObjectRef
    type: str | None
    meta: dict[str, Any]
    spec: dict[str, Any]
    status: dict[str, Any]
    relist: bool = False


@dataclass(frozen=True)
class CatalogueToRead:
    """A retry: the object is read afresh from the API server when its turn comes
    (`relist`: an MCP AgentTool's server did not answer; list it again)."""

    ref: ObjectRef
    relist: bool = False


QueuedCatalogue = CatalogueEvent | CatalogueToRead


def catalogue_key(ref: ObjectRef) -> CatalogueKey:
    return ref.kind, ref.name


def keep_relist(waiting: QueuedCatalogue, newer: QueuedCatalogue) -> QueuedCatalogue:
    """The catalogue queue's merge: a newer event of a key whose waiting item asks for a
    relist (the sweeper's pass, a server that did not answer) asks for it too. Else the
    event (an echo of the last listing's status, say) would find its generation listed
    and skip the listing until the next relist pass."""
    if waiting.relist and not newer.relist:
        return replace(newer, relist=True)
    return newer


def new_catalogue_queue() -> WorkQueue[CatalogueKey, QueuedCatalogue]:
    return WorkQueue(merge=keep_relist)


def new_catalogue_synced() -> Synced:
    """Each catalogue kind marked once its first listing is mirrored (the Agents wait)."""
    return Synced(kind.kind for kind in CATALOGUE_KINDS)
