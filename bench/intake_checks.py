"""What the intake benchmark waits for: the Agents it made, their rows, statuses and
observedGeneration in agreement, and the operator's own count of events by outcome."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, TEXT

from achilles.db.database import Database
from bench.cluster import (
    GROUP,
    VERSION,
    BenchCluster,
)
from bench.operator_process import OperatorUnderTest

TOUCHED_LABEL = "bench.achilles.io/touched"
NEW_PROMPT = "Summarise my week, and my month."


@dataclass
class Population:
    """The Agents the benchmark made: name -> (namespace, uid), and what changed."""

    agents: dict[str, tuple[str, str]] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    deleted: dict[str, str] = field(default_factory=dict)  # name -> uid
    added: list[str] = field(default_factory=list)


_EVENTS_LINE = re.compile(
    r'^achilles_agent_events_total\{event="([a-z]+)",outcome="([a-z]+)"\} ([0-9.e+]+)$'
)


def agent_events(operator: OperatorUnderTest) -> dict[str, int]:
    """The operator's Agent events handled so far, as "<event>/<outcome>" -> count."""
    counts: dict[str, int] = {}
    try:
        metrics = operator.metrics()
    except OSError:  # not serving yet: the process is still starting
        return counts
    for line in metrics.splitlines():
        match = _EVENTS_LINE.match(line)
        if match:
            counts[f"{match.group(1)}/{match.group(2)}"] = int(float(match.group(3)))
    return counts


def listed_count(counts: dict[str, int]) -> int:
    return sum(n for key, n in counts.items() if key.startswith("listed/"))


def touched_reconciled(cluster: BenchCluster, population: Population) -> bool:
    """Every changed and added Agent shows its generation observed, with its row's id."""
    listing = cast(
        dict[str, Any],
        cluster.custom.list_cluster_custom_object(
            GROUP, VERSION, "agents", label_selector=f"{TOUCHED_LABEL}=yes"
        ),
    )
    items = listing.get("items", [])
    expected = len(population.changed) + len(population.added)
    return len(items) == expected and all(_observed(item) for item in items)


def _observed(item: dict[str, Any]) -> bool:
    status = item.get("status") or {}
    return (
        status.get("observedGeneration") == item["metadata"].get("generation")
        and status.get("databaseId") is not None
    )


def rows_agree(database: Database, population: Population) -> bool:
    """The rows say what the Agents say: one per Agent, the new prompts, none deleted."""
    with database.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*) AS rows, "
                "count(*) FILTER (WHERE cr_name = ANY(:changed) AND prompt = :prompt) AS changed,"
                " count(*) FILTER (WHERE cr_uid = ANY(:deleted)) AS deleted,"
                " count(*) FILTER (WHERE cr_name = ANY(:added)) AS added FROM agents"
            ).bindparams(
                bindparam("changed", type_=ARRAY(TEXT)),
                bindparam("deleted", type_=ARRAY(TEXT)),
                bindparam("added", type_=ARRAY(TEXT)),
            ),
            {
                "changed": population.changed,
                "prompt": NEW_PROMPT,
                "deleted": list(population.deleted.values()),
                "added": population.added,
            },
        ).one()
    return bool(
        row.rows == len(population.agents)
        and row.changed == len(population.changed)
        and row.deleted == 0
        and row.added == len(population.added)
    )


def all_observed(cluster: BenchCluster) -> tuple[int, int]:
    """(Agents, Agents whose status has not observed their generation), in chunks."""
    seen = behind = 0
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": 1000}
        if token:
            kwargs["_continue"] = token
        listing = cast(
            dict[str, Any],
            cluster.custom.list_cluster_custom_object(GROUP, VERSION, "agents", **kwargs),
        )
        for item in listing.get("items", []):
            seen += 1
            behind += not _observed(item)
        token = listing.get("metadata", {}).get("continue")
        if not token:
            return seen, behind


class ListingTimeline:
    """When, after the operator's start, its listed Agent events reached 1, half and all
    of the Agents: where a restart's seconds go (process start and kopf's first page,
    then the handling), to the bench's one-second polling."""

    def __init__(self, started: float, agents: int) -> None:
        self._started = started
        self._marks = {"first listed Agent": 1}
        self._marks["half the Agents listed"] = max(1, agents // 2)
        self._marks["every Agent listed"] = agents
        self.steps: dict[str, float] = {}

    def saw(self, events: dict[str, int]) -> None:
        listed = listed_count(events)
        at = round(time.monotonic() - self._started, 1)
        for mark, count in self._marks.items():
            if mark not in self.steps and listed >= count:
                self.steps[mark] = at
