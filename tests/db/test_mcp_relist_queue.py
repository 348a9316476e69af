"""The MCP listings pass lists nothing itself (handlers/controllers/mcp_listings.py): it
puts each MCP source, read from the real database, on the catalogue workqueue as an
AgentTool to read afresh and list again, keyed as the AgentTool's own events and
retries. So a relist asked while a listing of that source is under way waits for it:
one listing per source at a time, each reading the status the one before wrote (one
Warning per failure; tests/cluster/install/test_mcp_discovery.py counts them)."""

from __future__ import annotations

from typing import Any

import pytest

from achilles.db.database import Database
from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueKey,
    CatalogueToRead,
    QueuedCatalogue,
    catalogue_key,
)
from achilles.handlers.controllers.mcp_listings import McpListingsPass
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.runtime.workqueue import WorkQueue
from achilles.services import catalogue

pytestmark = pytest.mark.db

NOWHERE = "http://127.0.0.1:9/mcp"  # never called: the pass lists nothing


def _spec(**fields: Any) -> AgentToolSpec:
    return AgentToolSpec.model_validate({"description": "reference", **fields})


def test_each_mcp_source_is_put_on_the_catalogue_queue_to_be_listed_again(
    database: Database,
) -> None:
    catalogue.mirror_tool(database, "remote", _spec(implementation="mcp", mcp={"url": NOWHERE}))
    catalogue.mirror_tool(database, "clock", _spec(implementation="builtin"))
    queue: WorkQueue[CatalogueKey, QueuedCatalogue] = WorkQueue()

    assert McpListingsPass(database, queue)() == 1  # the MCP source only

    ref = ObjectRef("AgentTool", "agenttools", "remote")
    key = catalogue_key(ref)
    assert queue.take(0) == (key, CatalogueToRead(ref, relist=True))
    assert queue.take(0) is None


def test_a_relist_waits_for_the_listing_of_its_source_under_way(database: Database) -> None:
    catalogue.mirror_tool(database, "remote", _spec(implementation="mcp", mcp={"url": NOWHERE}))
    queue: WorkQueue[CatalogueKey, QueuedCatalogue] = WorkQueue()
    ref = ObjectRef("AgentTool", "agenttools", "remote")
    key = catalogue_key(ref)
    # The AgentTool's listed event (the operator's start) is being handled: its listing
    # is under way on a catalogue thread.
    queue.put(key, CatalogueEvent(ref, None, {"name": "remote", "generation": 1}, {}, {}))
    assert queue.take(0) is not None

    McpListingsPass(database, queue)()  # the start-up relist pass, at the same moment

    assert queue.take(0) is None  # no second listing of it beside the first
    queue.done(key)
    assert queue.take(0) == (key, CatalogueToRead(ref, relist=True))  # then, afresh
