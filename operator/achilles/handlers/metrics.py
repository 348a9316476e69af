"""The operator's Prometheus metrics (served on ACHILLES_METRICS_PORT, the chart's
metrics Service). docs/observability.md lists each with its labels and meaning, and
tests/cluster/install/test_operator_metrics.py scrapes a running operator for every one.

Two kinds: what this replica did (counted where it does it: sum them over replicas),
and what the journal says (`achilles_runs_active`, `achilles_runs_ended_total`,
`achilles_job_to_heartbeat_seconds`, ...: read by each replica's run-metrics pass,
`controllers/run_metrics.py`, so every replica reports the same runs: take the max).
Label sets that are known in advance start at zero, so a rate or an alert sees the
first increment.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram

from achilles.domain.gates import LockReason
from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason

# Latencies of a run's way from its slot to its runner: tenths of a second when all is
# well, up to an hour when slots were missed (an operator down) or runs wait at the cap.
_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

# --- what this replica did ---
RUNS_ENQUEUED = Counter(
    "achilles_runs_enqueued_total", "Runs written by the engine", ["trigger", "state", "reason"]
)
RUNS_FINISHED = Counter(
    "achilles_runs_failed_by_operator_total", "Runs the operator failed", ["reason"]
)
RUNS_REAPED = Counter("achilles_runs_reaped_total", "Runs reaped as stale")
RUNS_REFUSED = Counter(
    "achilles_runs_refused_total",
    "Runs refused a start: a durable lock closed (no row: disabled, admin_paused, no_model,"
    " owner_missing, owner_inactive; the first closed) or a runtime gate (a skipped row:"
    " budget_exceeded, already_running)",
    ["trigger", "reason"],
)
JOBS_CREATED = Counter("achilles_jobs_created_total", "Run Jobs created")
RUN_REQUESTS = Counter("achilles_run_requests_total", "Manual run requests", ["outcome"])
QUEUE_DEPTH = Gauge("achilles_runs_waiting", "Queued runs without a Job yet")
EXECUTING = Gauge("achilles_runs_executing", "Runs with a Job that have not finished")
SLOT_TO_JOB = Histogram(
    "achilles_slot_to_job_seconds",
    "From a scheduled run's slot to its Job's creation",
    buckets=_LATENCY_BUCKETS,
)
SLOT_LATENESS = Histogram(
    "achilles_slot_lateness_seconds",
    "From a scheduled run's slot to the scheduler's enqueue of it",
    buckets=_LATENCY_BUCKETS,
)
LOOP_SECONDS = Histogram(
    "achilles_loop_seconds", "Duration of one pass of an operator loop", ["loop"]
)
LOOP_ERRORS = Counter("achilles_loop_errors_total", "Failed passes of an operator loop", ["loop"])
AGENT_EVENTS = Counter(
    "achilles_agent_events_total",
    "Agent events handled: listed (kopf's listing), added, modified, deleted; reconciled,"
    " unchanged (row and status already agreed: nothing written) or echo (our own write)",
    ["event", "outcome"],
)
AGENT_EVENTS_WAITING = Gauge(
    "achilles_agent_events_waiting",
    "Agents whose newest event waits on the workqueue for a handler thread",
)
STATUS_PATCHES = Counter(
    "achilles_status_patches_total",
    "Status patches of Achilles objects by source (reconcile: an Agent event's whole status;"
    " catalogue: AgentModel/AgentTool/AgentPlatform; journal: the status writer;"
    " withdrawn-request: a queued request withdrawn) and outcome (patched; gone: the object"
    " no longer exists; unchanged: the status writer found nothing to patch)",
    ["source", "outcome"],
)

# --- what the journal says (every replica reads the same) ---
RUNS_ACTIVE = Gauge(
    "achilles_runs_active",
    "Active runs in the journal by phase: waiting (queued, no Job), starting (Job made,"
    " not claimed), running",
    ["phase"],
)
OLDEST_WAITING = Gauge(
    "achilles_oldest_waiting_run_seconds", "Age of the oldest queued run without a Job (0: none)"
)
MAX_CONCURRENCY = Gauge(
    "achilles_max_concurrency", "The platform's cap on executing runs (AgentPlatform)"
)
RUNS_ENDED = Counter(
    "achilles_runs_ended_total",
    "Runs that reached a terminal state, from the journal",
    ["trigger", "state", "reason"],
)
JOB_TO_HEARTBEAT = Histogram(
    "achilles_job_to_heartbeat_seconds",
    "From a run's dispatch (just before its Job's create) to its runner's claim, the first"
    " heartbeat",
    buckets=_LATENCY_BUCKETS,
)

TRIGGERS = tuple(RunTrigger)
TERMINAL = (
    (RunState.SUCCEEDED, ""),
    *((RunState.FAILED, str(reason)) for reason in FailReason),
    *((RunState.SKIPPED, str(reason)) for reason in SkipReason),
)
REFUSALS = (*(str(lock) for lock in LockReason), *(str(reason) for reason in SkipReason))
STATUS_SOURCES = ("reconcile", "catalogue", "journal", "withdrawn-request")
PHASES = ("waiting", "starting", "running")


def _start_at_zero() -> None:
    for trigger in TRIGGERS:
        for state, reason in TERMINAL:
            RUNS_ENDED.labels(trigger, state, reason)
        for refusal in REFUSALS:
            RUNS_REFUSED.labels(trigger, refusal)
    for source in STATUS_SOURCES:
        for outcome in ("patched", "gone"):
            STATUS_PATCHES.labels(source, outcome)
    STATUS_PATCHES.labels("journal", "unchanged")
    for phase in PHASES:
        RUNS_ACTIVE.labels(phase)
    for reason in FailReason:
        RUNS_FINISHED.labels(reason)


_start_at_zero()


def count_enqueued(trigger: str, state: str, reason: str) -> None:
    """A run written (queued or skipped); a skipped one was refused by a runtime gate."""
    RUNS_ENQUEUED.labels(trigger, state, reason).inc()
    if state == RunState.SKIPPED:
        RUNS_REFUSED.labels(trigger, reason).inc()


def count_refused(trigger: str, closed_locks: Sequence[str]) -> None:
    """A run refused (no row) because these durable locks are closed."""
    RUNS_REFUSED.labels(trigger, closed_locks[0] if closed_locks else "unknown").inc()


def count_status_patch(source: str, patched: bool) -> bool:
    """A status patch's outcome (`patched` False: the object is gone); returns it."""
    STATUS_PATCHES.labels(source, "patched" if patched else "gone").inc()
    return patched
