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

from achilles.db.database import Database
from achilles.handlers.discovery import report_discovery
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.kinds import AGENT_TOOL
from achilles.runtime.loops import Passes
from achilles.services import mcp_sources

log = logging.getLogger(__name__)


class McpListingsPass:
    """The sweeper's pass: the listings on a thread of their own (a slow server may take
    its timeout per source, and the sweeper's other passes, the reaper's above all, must
    not wait for it); a pass that finds the previous one still listing does nothing.
    Holds what the listings use: the database, the API server, the namespace of the
    sources' Secrets (the runs'), and the passes it counts its own in."""

    def __init__(
        self, database: Database, resources: Resources, namespace: str, passes: Passes
    ) -> None:
        self.database = database
        self.resources = resources
        self.namespace = namespace
        self._passes = passes
        self._thread: threading.Thread | None = None

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._list, name="mcp-listings", daemon=True)
        self._thread.start()

    def _list(self) -> None:
        listed = self._passes.run("mcp-listings", self.relist_mcp_sources)
        if listed:
            log.info("listed the tools of %d MCP source(s) again", listed)

    def relist_mcp_sources(self) -> int:
        """List every MCP source's server again; how many were listed."""
        secrets = mcp_sources.secret_reader(self.resources.core, self.namespace)
        listed = 0
        for name in mcp_sources.source_names(self.database):
            ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name)
            body = self.resources.read_object(ref)
            if body is None:
                continue  # deleted meanwhile: its delete event removes the row
            discovery = mcp_sources.discover(self.database, secrets, name)
            if discovery is None:
                continue
            status = body.get("status") or {}
            generation = body.get("metadata", {}).get("generation")
            database_id = status.get("databaseId")
            report_discovery(self, ref, generation, status, discovery, database_id)
            listed += 1
        return listed
