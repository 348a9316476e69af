"""The catalogue kinds' list+watch: each of AgentModel, AgentTool and AgentPlatform has
its own (k8s/custom_watch.py, as the Agents have theirs), whose thread hands each event
to `on_catalogue_event`: it puts what the reconcile reads (a `CatalogueEvent`) on the
catalogue's workqueue, keyed by kind and name, for catalogue.py's threads. A kind's first
listing is handled before its watch goes on, and the kind marked synced: the Agents'
listing waits for the three (handlers/agents.py), so an Agent listed at a start finds
its model and tools mirrored, as a controller-runtime controller waits for the caches
its reconcile reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueKey,
    QueuedCatalogue,
    catalogue_key,
)
from achilles.handlers.context import RuntimeContext
from achilles.k8s.custom_watch import custom_watch
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import CustomResourceKind
from achilles.k8s.watching import Change, ListWatch, Page, follow_until
from achilles.runtime.manager import LoopHandle
from achilles.runtime.synced import Synced
from achilles.runtime.workqueue import WorkQueue

log = logging.getLogger("achilles.operator")

# How long a catalogue kind's first listing waits for its objects to be handled before
# the kind is marked synced anyway (the Agents' listing waits for the three).
SYNC_SECONDS = 30.0

_META = ("name", "uid", "generation", "deletionTimestamp")


def on_catalogue_event(
    queue: WorkQueue[CatalogueKey, QueuedCatalogue],
    kind: CustomResourceKind,
    type: str | None,
    body: Mapping[str, Any],
) -> CatalogueKey:
    """One event of a catalogue kind (type None: listed), on its watch's thread: put on
    the catalogue workqueue as the few fields the reconcile reads; its key."""
    meta: Mapping[str, Any] = body["metadata"]
    ref = ObjectRef(kind.kind, kind.plural, meta["name"], None, meta.get("uid"))
    # The few fields the reconcile reads; the body goes with its page or event.
    kept: dict[str, Any] = {k: meta[k] for k in _META if k in meta}
    queued = CatalogueEvent(
        ref, type, kept, dict(body.get("spec") or {}), dict(body.get("status") or {})
    )
    key = catalogue_key(ref)
    queue.put(key, queued)
    return key


@dataclass(frozen=True)
class CatalogueWatch:
    """One catalogue kind's list+watch and what its events need (`watch_of` builds it
    for its loop, handlers/manager.py): the catalogue workqueue, and `synced`, marked
    with the kind once its first listing is handled (the Agents wait for it)."""

    kind: CustomResourceKind
    watch: ListWatch[dict[str, Any]]
    queue: WorkQueue[CatalogueKey, QueuedCatalogue]
    synced: Synced


def watch_of(context: RuntimeContext, kind: CustomResourceKind) -> CatalogueWatch:
    watch = custom_watch(context.resources, kind)
    return CatalogueWatch(kind, watch, context.catalogue_queue, context.catalogue_synced)


def follow_catalogue(watched: CatalogueWatch, stop: threading.Event) -> bool:
    """One pass of a catalogue kind's list+watch: list it when nothing is known yet,
    then watch until the stream ends (True: the next pass resumes where it was). The
    first listing's objects are put on the queue and, before the watch goes on, handled
    (SYNC_SECONDS at most: an MCP server that does not answer holds its AgentTool's
    handling for its timeout): the kind is then marked synced. An API server that failed
    raises; the next pass resumes from the last event taken."""
    kind, queue = watched.kind, watched.queue
    listed: list[CatalogueKey] = []

    def page(item: Page[dict[str, Any]]) -> None:
        nonlocal listed
        if item.first:
            listed = []
        listed += [on_catalogue_event(queue, kind, None, body) for body in item.items]
        if item.last and kind.kind in watched.synced.pending():
            if queue.wait_handled(listed, SYNC_SECONDS):
                log.info("%d %s(s) listed and mirrored", len(listed), kind.kind)
            else:
                log.warning("%ss listed but not all mirrored within %.0f s; the Agents"
                            " go on", kind.kind, SYNC_SECONDS)  # fmt: skip
            watched.synced.mark(kind.kind)

    def change(item: Change[dict[str, Any]]) -> None:
        on_catalogue_event(queue, kind, item.type, item.item)

    follow_until(watched.watch, stop, page, change)
    return True


def run_watch(watched: CatalogueWatch, loop: LoopHandle) -> None:
    """A watch ended is resumed at once; a failed one after the runtime's backoff."""
    loop.drive(lambda: 0.0 if follow_catalogue(watched, loop.stop) else None)
