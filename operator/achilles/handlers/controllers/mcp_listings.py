"""The MCP listings pass: each MCP AgentTool's server listed again, every
`mcp_relist_every` seconds (issue 38), so a server's tools changing, or the server going
away, shows in the AgentTool's status and Events without an edit of the spec.

The catalogue handler lists a source when its spec is new; this pass lists them all
again later. Both report through `handlers/discovery.py` (Ready, the status fields, the
Event of the listing). Everything else is `services/mcp_sources.py`'s.
"""

from __future__ import annotations

import logging
import threading

from achilles.handlers.context import RuntimeContext
from achilles.handlers.discovery import report_discovery
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import AGENT_TOOL
from achilles.services import mcp_sources

log = logging.getLogger(__name__)


def relist_mcp_sources(context: RuntimeContext) -> int:
    """List every MCP source's server again; how many were listed."""
    secrets = mcp_sources.secret_reader(
        context.resources.core, context.config.job_template.namespace
    )
    listed = 0
    for name in mcp_sources.source_names(context.database):
        ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name)
        body = context.resources.read_object(ref)
        if body is None:
            continue  # deleted meanwhile: its delete event removes the row
        discovery = mcp_sources.discover(context.database, secrets, name)
        if discovery is None:
            continue
        status = body.get("status") or {}
        generation = body.get("metadata", {}).get("generation")
        report_discovery(context, ref, generation, status, discovery, status.get("databaseId"))
        listed += 1
    return listed


class McpListingsPass:
    """The sweeper's pass: the listings on a thread of their own (a slow server may take
    its timeout per source, and the sweeper's other passes, the reaper's above all, must
    not wait for it); a pass that finds the previous one still listing does nothing."""

    def __init__(self, context: RuntimeContext) -> None:
        self._context = context
        self._thread: threading.Thread | None = None

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._list, name="mcp-listings", daemon=True)
        self._thread.start()

    def _list(self) -> None:
        listed = self._context.run_pass("mcp-listings", lambda: relist_mcp_sources(self._context))
        if listed:
            log.info("listed the tools of %d MCP source(s) again", listed)
