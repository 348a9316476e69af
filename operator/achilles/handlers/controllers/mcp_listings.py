"""The MCP listings pass: each MCP AgentTool's server listed again, every
`mcp_relist_every` seconds (issue 38), so a server's tools changing, or the server going
away, shows in the AgentTool's status and Events without an edit of the spec.

The pass lists nothing itself: it puts each source on the catalogue workqueue as an
AgentTool to read afresh and list again (`CatalogueToRead(relist=True)`), and the
catalogue's threads list it (handlers/catalogue.py). The queue is keyed by kind and
name, so a source is listed by one thread at a time whoever asked (its spec's event, a
retry of a server that did not answer, this pass): each listing reads the status the one
before it wrote, and a server that stays down is warned of once (handlers/discovery.py),
not once per path that happened to list it at the same moment.
"""

from __future__ import annotations

import logging

from achilles.db.database import Database
from achilles.handlers.catalogue_queue import (
    CatalogueKey,
    CatalogueToRead,
    QueuedCatalogue,
    catalogue_key,
)
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import AGENT_TOOL
from achilles.runtime.workqueue import WorkQueue
from achilles.services import mcp_sources

log = logging.getLogger(__name__)


class McpListingsPass:
    """The sweeper's pass: every MCP source put on the catalogue workqueue to be listed
    again. Holds what it uses: the database (the sources' names) and that queue."""

    def __init__(self, database: Database, queue: WorkQueue[CatalogueKey, QueuedCatalogue]) -> None:
        self.database = database
        self.queue = queue

    def __call__(self) -> int:
        """How many sources were put on the queue."""
        names = mcp_sources.source_names(self.database)
        for name in names:
            ref = ObjectRef(AGENT_TOOL.kind, AGENT_TOOL.plural, name)
            self.queue.put(catalogue_key(ref), CatalogueToRead(ref, relist=True))
        if names:
            log.info("%d MCP source(s) put on the catalogue queue to be listed again", len(names))
        return len(names)
