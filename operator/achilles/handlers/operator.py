"""kopf's side of the operator: its settings, the runtime's start and stop, the probe.

Every setting is explicit, with why: the defaults of a framework are not a decision.
"""

from __future__ import annotations

from typing import Any

import kopf

from achilles.db.database import Database
from achilles.handlers import metrics
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import RuntimeContext
from achilles.handlers.manager import Runtime
from achilles.k8s.client import api_client
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import Resources
from achilles.runtime.memory import settle_collector
from achilles.services.agent_intake import SettledAgents
from achilles.telemetry.spans import operator_spans

# The operator's last spans may take this long to leave at its shutdown.
SPANS_FLUSH_SECONDS = 5.0

RUNTIME_KEY = "achilles-runtime"
# The longest the start waits for the intake snapshot (about 2 s at 10,000 rows, 17 s
# at 100,000), well inside the chart's startupProbe (120 s).
SNAPSHOT_WAIT_SECONDS = 30.0


@kopf.on.startup()
def configure(
    settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    # kopf runs the start-up and clean-up activities and the liveness probe; it watches
    # no resource (every kind is a list+watch of the runtime's: handlers/manager.py), so
    # its watching, persistence and posting settings have nothing to act on.
    # Nor does it need to notice CRDs appearing or going away (a watch of every CRD, and
    # the RBAC for it): the kinds are the runtime's to list and watch.
    settings.scanning.disabled = True
    # API calls must not hang an activity forever on a dead connection.
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # kopf's threads for its sync calls: the startup and cleanup activities and the
    # liveness probe. Two: the startup holds one while it waits for the intake snapshot
    # (SNAPSHOT_WAIT_SECONDS at most), and the probe must still find one.
    settings.execution.max_workers = 2
    # Standby replicas are safe without kopf peering: every decision that could be taken
    # twice is taken in PostgreSQL (SKIP LOCKED, advisory lock, unique indexes). Peering
    # would not make one replica the only actor anyway: a frozen kopf stops its own
    # watch-streams and its daemons/timers (kopf docs/peering.rst, "Priorities";
    # nolar/kopf#675), and kopf has none here, not the threads this handler starts.
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
        # The agent watch lists every Agent once the runtime starts. With the snapshot
        # read first, each listed Agent that agrees is settled on its thread as it
        # arrives; read beside the listing, every Agent listed before the read ended was
        # queued, its body held, for a handler thread that waited for the read
        # (`achilles bench intake`: the RSS a restart leaves). A read that fails or hangs
        # does not hold the start: the first listed Agent reads it again.
        context.settled_agents.preload().join(SNAPSHOT_WAIT_SECONDS)
    metrics.AGENT_EVENTS_WAITING.set_function(lambda: len(context.agent_queue))
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
