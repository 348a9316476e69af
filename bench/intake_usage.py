"""What `achilles bench intake` reads beside the operator: its CPU samples (when it
went idle, what it used between two instants) and the API server's own listing of
the Agents, the restart's floor."""

from __future__ import annotations

import json
import time
from typing import Any, cast

from achilles.k8s.watching import PAGE_SIZE as LISTING_PAGE
from bench.cluster import GROUP, VERSION, BenchCluster
from bench.operator_process import Usage

# The operator counts as idle once its CPU over the trailing IDLE_PROBE_S is at most this.
IDLE_CORES = 0.1
IDLE_PROBE_S = 5.0


def idle_since(samples: list[Usage], since: float) -> float | None:
    """The first instant after `since` that ends a window of at least IDLE_PROBE_S
    seconds in which the operator's CPU was at most IDLE_CORES."""
    window = [s for s in samples if s.at >= since]
    start = 0
    for last in window:
        # The latest sample at least IDLE_PROBE_S before `last`.
        while start + 1 < len(window) and last.at - window[start + 1].at >= IDLE_PROBE_S:
            start += 1
        first = window[start]
        span = last.at - first.at
        if span >= IDLE_PROBE_S and (last.cpu_s - first.cpu_s) / span <= IDLE_CORES:
            return last.at
    return None


def cpu_between(samples: list[Usage], since: float, until: float) -> float:
    """The process's CPU seconds between the samples nearest `since` and `until`."""
    inside = [s for s in samples if since <= s.at <= until] or samples[-1:]
    before = [s for s in samples if s.at <= since] or inside[:1]
    return inside[-1].cpu_s - before[-1].cpu_s


def listing_alone(cluster: BenchCluster) -> tuple[int, float]:
    """Every Agent listed and decoded in the operator's pages, one page after the other
    as kopf lists them at a start, with no operator running: (Agents, seconds)."""
    started = time.monotonic()
    listed, token = 0, None
    while True:
        response = cluster.custom.list_cluster_custom_object(
            GROUP, VERSION, "agents", limit=LISTING_PAGE, _continue=token, _preload_content=False
        )
        page = json.loads(cast(Any, response).data)
        listed += len(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return listed, time.monotonic() - started
