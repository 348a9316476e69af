"""The run-metrics pass (one of the sweeper's): what the journal says about runs, as
Prometheus figures (handlers/metrics.py). One short transaction per pass
(`services/run_metrics.py`), however often Prometheus scrapes.

Keeps in memory only where the last window closed; a restarted operator starts
counting anew (its counters restart at zero, which Prometheus' rate() expects).
"""

from __future__ import annotations

from datetime import datetime

from achilles.db.database import Database
from achilles.handlers import metrics
from achilles.services import run_metrics

# Prometheus scrapes every 15 to 60 s (its default: 60); a pass every 30 s keeps the
# gauges as fresh as a common 30 s scrape, for 10 transactions per 5 min (kept-jobs bench).
RUN_METRICS_EVERY = 30.0


class RunMetricsPass:
    def __init__(self, database: Database) -> None:
        self.database = database
        self.since: datetime | None = None

    def __call__(self) -> run_metrics.RunFigures:
        figures = run_metrics.read_run_figures(self.database, self.since)
        active = figures.active
        metrics.RUNS_ACTIVE.labels("waiting").set(active.waiting)
        metrics.RUNS_ACTIVE.labels("starting").set(active.starting)
        metrics.RUNS_ACTIVE.labels("running").set(active.running)
        metrics.OLDEST_WAITING.set(figures.oldest_waiting_seconds)
        metrics.MAX_CONCURRENCY.set(figures.max_concurrency)
        for ended in figures.ended:
            metrics.RUNS_ENDED.labels(ended.trigger, ended.state, ended.reason).inc(ended.count)
        for delay in figures.claim_delays:
            metrics.JOB_TO_HEARTBEAT.observe(delay)
        self.since = figures.until  # only once recorded: a failed pass is counted again
        return figures
