"""The Agents' listing waits for the catalogue's (handlers/catalogue_watch.py,
runtime/synced.py): a catalogue kind is marked synced only once the objects of its first
listing are handled from its workqueue, so an Agent listed at a start finds its model
mirrored; a kind whose objects are not handled within its bound is marked anyway, and a
later listing (after a 410) waits for nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, cast

from achilles.handlers import catalogue_watch as catalogue
from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    QueuedCatalogue,
    new_catalogue_queue,
    new_catalogue_synced,
)
from achilles.k8s.resources.kinds import AGENT_MODEL
from achilles.k8s.watching import Change, ListWatch, Page
from achilles.runtime.synced import Synced
from achilles.runtime.workqueue import WorkQueue


def _model(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": 1}, "spec": {}}


class Listing:
    """What `ListWatch.follow` hands over: one listing in two pages, then a change."""

    def __init__(self, *pages: list[dict[str, Any]]) -> None:
        self.pages = pages

    def follow(self) -> Iterator[Page[dict[str, Any]] | Change[dict[str, Any]]]:
        for i, items in enumerate(self.pages):
            yield Page(items, first=i == 0, last=i == len(self.pages) - 1)
        yield Change("ADDED", _model("later"))


def _watched(
    listing: Listing, queue: WorkQueue[Any, QueuedCatalogue], synced: Synced
) -> catalogue.CatalogueWatch:
    watch = cast(ListWatch[dict[str, Any]], listing)
    return catalogue.CatalogueWatch(AGENT_MODEL, watch, queue, synced)


def test_the_kind_is_synced_once_its_listed_objects_are_handled() -> None:
    queue = new_catalogue_queue()
    synced = new_catalogue_synced()
    watched = _watched(Listing([_model("a")], [_model("b")]), queue, synced)
    handled: list[str] = []

    def worker() -> None:
        # Handles the two listed models; the kind must not be synced before both are.
        for _ in range(2):
            taken = queue.take(30)
            assert taken is not None
            key, item = taken
            assert isinstance(item, CatalogueEvent)
            assert item.type is None
            assert AGENT_MODEL.kind in synced.pending()
            handled.append(key[1])
            queue.done(key)

    thread = threading.Thread(target=worker)
    thread.start()
    assert catalogue.follow_catalogue(watched, threading.Event())
    thread.join(30)
    assert handled == ["a", "b"]
    assert synced.pending() == {"AgentTool", "AgentPlatform"}
    assert queue.waiting(("AgentModel", "later"))  # the watch went on after the sync
    for kind in ("AgentTool", "AgentPlatform"):
        synced.mark(kind)
    assert synced.wait(0)


def test_a_listing_not_handled_in_time_is_marked_synced_anyway(monkeypatch: Any) -> None:
    monkeypatch.setattr(catalogue, "SYNC_SECONDS", 0.0)
    queue = new_catalogue_queue()
    synced = Synced(["AgentModel"])
    assert catalogue.follow_catalogue(
        _watched(Listing([_model("a")]), queue, synced), threading.Event()
    )
    assert synced.wait(0)
    assert queue.waiting(("AgentModel", "a"))  # still to be handled, by the queue's threads


def test_a_later_listing_waits_for_nothing() -> None:
    queue = new_catalogue_queue()
    synced = Synced([])  # the kind synced before (a relist after the watch expired)
    assert catalogue.follow_catalogue(
        _watched(Listing([_model("a")]), queue, synced), threading.Event()
    )
    assert queue.waiting(("AgentModel", "a"))
    assert queue.waiting(("AgentModel", "later"))


def test_synced_waits_for_every_name() -> None:
    synced = Synced(["x", "y"])
    assert not synced.wait(0)
    synced.mark("x")
    assert synced.pending() == {"y"}
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(synced.wait(30)))
    waiter.start()
    synced.mark("y")
    waiter.join(30)
    assert waited == [True]
