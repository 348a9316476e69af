"""An MCP AgentTool's listing reported on the object, by the catalogue handler (a spec new
to the status, a retry, or the MCP listings pass's relist through the catalogue
workqueue, controllers/mcp_listings.py). Its Event is `McpToolsChanged` only when the
digest moved, so two replicas listing the same server announce a change once
(services/mcp_sources.py locks the listing's row while it is recorded); a failure's
Warning only when the status did not already say it (a server that stays down is listed
again with the catalogue workqueue's backoff, one listing per source at a time: one
Warning, not one a try)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from achilles.domain.agent_status import condition, needs_patch
from achilles.domain.vocabulary import ConditionType
from achilles.handlers import metrics
from achilles.handlers.context import Handles
from achilles.k8s.objects import ObjectRef
from achilles.services import mcp_sources


def report_discovery(
    context: Handles,
    ref: ObjectRef,
    generation: int | None,
    previous: dict[str, Any],
    discovery: mcp_sources.Discovery,
    database_id: int | None,
) -> None:
    """The listing on the AgentTool: its Event, then Ready and the status fields."""
    if discovery.notice is not None and not _said_already(previous, discovery):
        notice = discovery.notice
        context.resources.post_event(ref, notice.type, notice.reason, notice.message)
    ready = condition(
        ConditionType.READY,
        discovery.ready,
        discovery.reason,
        discovery.message,
        previous.get("conditions"),
        datetime.now(UTC),
        generation,
    )
    desired = {
        "observedGeneration": generation,
        "conditions": [ready],
        "databaseId": database_id,
        **discovery.status,
    }
    if needs_patch(previous, desired):
        metrics.count_status_patch("catalogue", context.resources.patch_status(ref, desired))


def _said_already(previous: dict[str, Any], discovery: mcp_sources.Discovery) -> bool:
    """A failed listing whose verdict and error the status shows already."""
    if discovery.ready:
        return False
    for found in previous.get("conditions") or []:
        if found.get("type") == ConditionType.READY:
            return (found.get("status"), found.get("reason"), found.get("message")) == (
                "False",
                discovery.reason,
                discovery.message,
            )
    return False
