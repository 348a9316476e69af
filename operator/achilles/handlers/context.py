"""What the operator's controllers and object handlers share: one `RuntimeContext`.

It holds the process's handles (database, API clients, settings), the wakes by which
one part tells the loops that something happened (`wakes`: routed by handlers/
manager.py's table), and the four pieces of state the operator keeps in
memory (the status queue, the statuses written, the Agent and catalogue events waiting
for a thread, with their re-adds waiting out a backoff). Everything else
lives in PostgreSQL and in the API server, so a restart loses nothing but time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from achilles.db.database import Database, outage
from achilles.handlers import metrics
from achilles.handlers.agent_queue import QueuedAgent
from achilles.handlers.catalogue_queue import (
    CatalogueKey,
    QueuedCatalogue,
    new_catalogue_queue,
    new_catalogue_synced,
)
from achilles.handlers.config import OperatorConfig
from achilles.handlers.signals import Happened
from achilles.handlers.statuses import StatusQueue, WrittenStatuses
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import Resources
from achilles.runtime.loops import Passes
from achilles.runtime.synced import Synced
from achilles.runtime.wake import Wakes
from achilles.runtime.workqueue import WorkQueue
from achilles.services.agent_intake import SettledAgents
from achilles.services.run_objects import RunObjects
from achilles.telemetry.spans import NO_SPANS, Spans

# An owner's other agents get the weekly budget a run changed in turns (StatusQueue):
# at most 100 patches every 10 s per replica, however many agents an owner has.
SIBLING_REFRESH_SECONDS = 10.0
SIBLING_BATCH = 100


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


class LoopMetrics:
    """A pass's duration and failure, as the operator's Prometheus figures."""

    def passed(self, loop: str, seconds: float) -> None:
        metrics.LOOP_ERRORS.labels(loop)  # at zero from the first pass on
        metrics.LOOP_SECONDS.labels(loop).observe(seconds)

    def failed(self, loop: str) -> None:
        metrics.LOOP_ERRORS.labels(loop).inc()


def operator_passes() -> Passes:
    """The loops' passes, counted as Prometheus figures; the database away (restarting:
    its connections refused or lost) is a failure the loops expect, logged as one line."""
    return Passes(LoopMetrics(), expected=outage)


class Handles(Protocol):
    """The journal and the API server: what the shared helpers (events.py, owed_specs.py)
    use, held by the context and by each reconciler that posts Events or owed specs."""

    @property
    def database(self) -> Database: ...

    @property
    def resources(self) -> Resources: ...


@dataclass(frozen=True)
class StatusMarks:
    """How a part says Agents' journal fields moved: they go on the status queue and
    `status-moved` is emitted (the status writer patches them next)."""

    statuses: StatusQueue
    emit: Callable[[Happened], None]

    def mark_dirty(self, agent_ids: Iterable[int]) -> None:
        """These agents' journal fields moved: the status writer patches them next."""
        self.statuses.mark(agent_ids)
        self.emit(Happened.STATUS_MOVED)

    def want_reconcile(self, agent_ids: Iterable[int]) -> None:
        """Reconcile these agents at their next event, which the status writer's patch of
        their moved nextRunAt causes: their owner's zone moved or stopped being a zone,
        and the `Scheduled` condition follows it."""
        ids = list(agent_ids)
        self.statuses.want_reconcile(ids)
        self.mark_dirty(ids)


class MarkingHandles(Handles, Protocol):
    """The journal, the API server and the status marks: what a run's Events use (its
    Agent's status follows them; events.py)."""

    @property
    def marks(self) -> StatusMarks: ...


@dataclass
class RuntimeContext:
    config: OperatorConfig
    database: Database
    resources: Resources
    jobs: RunJobs
    stop: threading.Event = field(default_factory=threading.Event)
    # Who wakes whom: a part emits what happened (`Happened`), and the manager's table
    # (handlers/manager.py) routes each signal to the loops that declared it a source.
    wakes: Wakes[Happened] = field(default_factory=Wakes)
    # Set while the dispatcher is not making Jobs: cleared for each of its passes and
    # while a pass leaves more runs to dispatch at once (a slot's burst). The status
    # writer waits for it, a few seconds at most, so that the Agents' status patches
    # (and their echoes) do not take the API server's writes from a slot's Jobs.
    dispatch_idle: threading.Event = field(default_factory=_set_event)
    statuses: StatusQueue = field(
        default_factory=lambda: StatusQueue(SIBLING_REFRESH_SECONDS, SIBLING_BATCH)
    )
    # The journal fields of each Agent's status as last patched (patch only changes).
    written_statuses: WrittenStatuses = field(default_factory=WrittenStatuses)
    passes: Passes = field(default_factory=operator_passes)
    # The rows' digests a listed Agent is checked against (the start-up intake: an Agent
    # that agrees with its row and status costs nothing). None: reconcile every one.
    settled_agents: SettledAgents | None = None
    # The operator's spans (OpenTelemetry, when an OTLP endpoint is configured).
    spans: Spans = NO_SPANS
    # Agent events waiting for a handler thread (agents.py; its threads: manager.py).
    agent_queue: WorkQueue[str, QueuedAgent] = field(default_factory=WorkQueue)
    # AgentModel, AgentTool and AgentPlatform events waiting for theirs (catalogue.py).
    catalogue_queue: WorkQueue[CatalogueKey, QueuedCatalogue] = field(
        default_factory=new_catalogue_queue
    )
    # The catalogue kinds whose first listing is mirrored: the Agents' listing waits.
    catalogue_synced: Synced = field(default_factory=new_catalogue_synced)
    # Run pods and Jobs as the watchers know them; the sweeper reads it (no listing).
    run_objects: RunObjects = field(init=False)

    def __post_init__(self) -> None:
        self.run_objects = RunObjects(
            self.database, self.jobs, start_deadline=self.config.start_deadline, spans=self.spans
        )

    @property
    def marks(self) -> StatusMarks:
        """The status marks on this context's queue and wakes (for a reconciler)."""
        return StatusMarks(self.statuses, self.wakes.emit)

    def mark_dirty(self, agent_ids: Iterable[int]) -> None:
        """These agents' journal fields moved: the status writer patches them next."""
        self.marks.mark_dirty(agent_ids)

    def want_reconcile(self, agent_ids: Iterable[int]) -> None:
        """Reconcile these agents at their next event (`StatusMarks.want_reconcile`)."""
        self.marks.want_reconcile(agent_ids)

    def health(self) -> dict[str, float]:
        """Seconds since each loop last completed a pass."""
        return self.passes.health()
