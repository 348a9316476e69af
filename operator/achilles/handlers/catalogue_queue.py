"""What the catalogue's workqueue holds: an event of an AgentModel, AgentTool or
AgentPlatform (the fields its handler reads), or, for a retry, the object to read afresh
(and, for an MCP AgentTool whose server did not answer, to list again). Keyed by kind and
name (the three kinds are cluster-scoped); the newest item of a key wins, as each carries
the whole object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from achilles.k8s.objects import ObjectRef

CatalogueKey = tuple[str, str]  # (kind, name)


@dataclass(frozen=True)
class CatalogueEvent:
    """kopf's event type (None: listed) and the object's metadata, spec and status;
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
