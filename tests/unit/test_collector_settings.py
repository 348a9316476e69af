"""The operator's garbage-collector settings once it has started (runtime/memory.py)."""

from __future__ import annotations

import gc
import weakref

from achilles.runtime.memory import OLDEST_THRESHOLD, MemoryPass, settle_collector


def test_the_start_leaves_the_collector_s_walks_and_full_collections_are_rarer() -> None:
    threshold = gc.get_threshold()
    try:
        settle_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (*threshold[:2], OLDEST_THRESHOLD)
        # A cycle made after the start is still collected.
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class _Body:
    """What kopf's Body is to the collector: a body and its views referring back to it."""

    def __init__(self) -> None:
        self.raw = {"kind": "Agent", "spec": {"prompt": "x" * 10_000}}
        self.view = self


def test_the_memory_pass_frees_garbage_cycles_the_rare_full_collections_left() -> None:
    threshold = gc.get_threshold()
    gc.disable()  # as an idle operator: nothing allocates, no collection runs by itself
    try:
        body = _Body()
        alive = weakref.ref(body)
        gc.collect(1)  # promoted to the oldest generation, as a body queued during a listing
        del body
        assert alive() is not None  # reference counting alone does not free a cycle
        memory_pass = MemoryPass()
        memory_pass()
        assert alive() is None
        # Nothing collected since, nothing allocated: the next pass walks nothing.
        collections = gc.get_stats()[2]["collections"]
        memory_pass()
        assert gc.get_stats()[2]["collections"] == collections
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
