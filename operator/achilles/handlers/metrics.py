"""The operator's Prometheus metrics (served on ACHILLES_METRICS_PORT, the chart's
metrics Service)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS_ENQUEUED = Counter(
    "achilles_runs_enqueued_total", "Runs written by the engine", ["trigger", "state", "reason"]
)
RUNS_FINISHED = Counter(
    "achilles_runs_failed_by_operator_total", "Runs the operator failed", ["reason"]
)
RUNS_REAPED = Counter("achilles_runs_reaped_total", "Runs reaped as stale")
JOBS_CREATED = Counter("achilles_jobs_created_total", "Run Jobs created")
RUN_REQUESTS = Counter("achilles_run_requests_total", "Manual run requests", ["outcome"])
QUEUE_DEPTH = Gauge("achilles_runs_waiting", "Queued runs without a Job yet")
EXECUTING = Gauge("achilles_runs_executing", "Runs with a Job that have not finished")
SLOT_TO_JOB = Histogram(
    "achilles_slot_to_job_seconds",
    "From a scheduled run's slot to its Job's creation",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
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
