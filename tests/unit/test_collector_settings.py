"""The operator's garbage-collector settings once it has started (handlers/runtime/memory.py)."""

from __future__ import annotations

import gc

from achilles.handlers.runtime.memory import OLDEST_THRESHOLD, settle_collector


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
