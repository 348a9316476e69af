"""kopf's side of the operator: its settings, the runtime's start and stop, the probe.

Every setting is explicit, with why: the defaults of a framework are not a decision.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from achilles.db.database import Database
from achilles.handlers import metrics
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import CONTEXT_KEY, RuntimeContext
from achilles.handlers.diffbase import NoDiffBase
from achilles.handlers.manager import Runtime
from achilles.k8s.client import api_client
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import Resources
from achilles.k8s.resources.common import API_GROUP
from achilles.runtime.memory import settle_collector
from achilles.services.agent_intake import SettledAgents
from achilles.telemetry.spans import operator_spans

# The operator's last spans may take this long to leave at its shutdown.
SPANS_FLUSH_SECONDS = 5.0

RUNTIME_KEY = "achilles-runtime"
# The longest the start waits for the intake snapshot (about 2 s at 10,000 rows, 17 s
# at 100,000), well inside the chart's startupProbe (120 s).
SNAPSHOT_WAIT_SECONDS = 30.0
# The listing at start comes in pages of this many objects: a single list of 10,000
# Agents is ~50 MB of JSON parsed at once, a peak the process's RSS keeps (`achilles
# bench intake`, which also times the API server's own listing in these pages).
LISTING_PAGE = 500


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    # Our own prefix for kopf's bookkeeping, so it never collides with another operator's.
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    # Event handlers only: no diff is ever computed, so no body is copied to keep one.
    settings.persistence.diffbase_storage = NoDiffBase()
    # API calls must not hang a handler forever on a dead connection.
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # A watch that hears nothing for this long is restarted (half-open TCP connections).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.inactivity_timeout = 600
    settings.watching.reconnect_backoff = 1.0
    settings.watching.chunk_size = LISTING_PAGE
    # kopf's per-object worker keeps the last body it handled until it has been idle this
    # long (5 s by default): at a restart's listing that was 5 s of every listed Agent's
    # body at once. At 10,000 Agents the probe counted 6,211 bodies and 11,975 tasks alive
    # at the peak with 5 s, 1,213 and 1,822 with 0.5 s, and the RSS after the restart fell
    # from 284 to 221 MiB (`achilles bench intake --memory-probe`). An object's next event
    # after that only starts a new worker.
    settings.queueing.idle_timeout = 0.5
    # kopf's threads for its sync calls: the startup and cleanup activities and the
    # liveness probe. Every resource handler is async and puts its event on a workqueue
    # whose threads are ours (handlers/manager.py). Two: the startup holds one while it
    # waits for the intake snapshot (SNAPSHOT_WAIT_SECONDS at most), and the probe must
    # still find one.
    settings.execution.max_workers = 2
    # Only warnings and errors become Kubernetes Events; our own Events say the rest.
    settings.posting.level = logging.WARNING
    # kopf logs "Handler ... succeeded" at INFO for every event of every object: 10,000
    # lines at each start-up listing of 10,000 Agents. Its warnings and errors stay.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # Standby replicas are safe without kopf peering: every decision that could be
    # taken twice is taken in PostgreSQL (SKIP LOCKED, advisory lock, unique indexes).
    # Peering would not make one replica the only actor anyway: a frozen kopf stops its
    # own watch-streams and its daemons/timers (kopf docs/peering.rst, "Priorities";
    # nolar/kopf#675), not the threads our startup handler starts (handlers/manager.py).
    # Standalone, per the same page, means two replicas may both react to one event:
    # our handlers are idempotent and the database decides, so that is harmless.
    settings.peering.standalone = True
    settings.peering.mandatory = False

    config = OperatorConfig.from_env()
    # No pre-ping: every loop pass and every handling is retried after a failure, so a
    # connection that died with a database restart costs one failed pass, not a round
    # trip before every transaction (docs/performance.md, idle transactions).
    database = Database(
        config.database_url, pool_size=10, application_name="achilles-operator", pre_ping=False
    )
    api = api_client()
    context = RuntimeContext(
        config=config,
        database=database,
        resources=Resources(api),
        jobs=RunJobs(api, config.job_template.namespace),
        settled_agents=SettledAgents(database),
        spans=operator_spans(),
    )
    if context.settled_agents is not None:
        # kopf lists every Agent once this handler returns. With the snapshot read first,
        # each listed Agent that agrees is settled in kopf's event loop as it arrives;
        # read beside the listing, every Agent listed before the read ended was queued,
        # its body held, for a handler thread that waited for the read
        # (`achilles bench intake`: the RSS a restart leaves). A read that fails or hangs
        # does not hold the start: the first listed Agent reads it again.
        context.settled_agents.preload().join(SNAPSHOT_WAIT_SECONDS)
    metrics.AGENT_EVENTS_WAITING.set_function(lambda: len(context.agent_queue))
    memo[CONTEXT_KEY] = context
    memo[RUNTIME_KEY] = runtime = Runtime(context)
    # Before the loops and kopf's listing allocate: the start's objects leave the
    # collector's walks (runtime/memory.py).
    settle_collector()
    runtime.start()
    logger.info("achilles runtime started: runs in namespace %s", config.job_template.namespace)


@kopf.on.cleanup()
def shutdown(memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.get(RUNTIME_KEY)
    if isinstance(runtime, Runtime):
        runtime.shutdown()
        runtime.context.database.dispose()
        runtime.context.spans.close(SPANS_FLUSH_SECONDS)


@kopf.on.probe(id="loops")
def loops_health(memo: kopf.Memo, **_: Any) -> dict[str, float]:
    """Seconds since each loop last completed a pass (the liveness endpoint shows it)."""
    runtime = memo.get(RUNTIME_KEY)
    return runtime.context.health() if isinstance(runtime, Runtime) else {}
