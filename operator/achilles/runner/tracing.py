"""The run's OpenTelemetry trace, when the Job's environment asks for one.

Off unless an OTLP endpoint is set (`telemetry/settings.py`): then nothing of
OpenTelemetry is imported, and the run costs what it did without it
(`tests/db/test_run_tracing.py` checks the import log). On, the trace continues the
operator's dispatch span (`TRACEPARENT` in the Job's environment), its spans come from
the run's steps (`runner/steps.py` tells `telemetry/run_spans.py`), and the process
waits at most `FLUSH_TIMEOUT` at its end for the last spans to leave: an unreachable
collector costs a run that much, never its outcome.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.runner.startup import permanent_imports
from achilles.runner.steps import StepObserver
from achilles.telemetry.settings import RUNNER_SERVICE, tracing_enabled

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 5.0


class RunTrace(StepObserver, Protocol):
    def close(self, timeout: float) -> bool: ...


def start_run_trace(
    spec: RunSpec,
    endpoint: ModelEndpoint,
    *,
    claimed: float,
    environ: Mapping[str, str] = os.environ,
) -> RunTrace | None:
    """The run's trace, its root span started at the claim (`claimed`, monotonic), or
    None when tracing is off or could not start (logged; the run goes on without)."""
    if not tracing_enabled(environ):
        return None
    try:
        with permanent_imports():
            from achilles.telemetry.provider import Tracing, parent_from_env
            from achilles.telemetry.run_spans import RunSpans

        started_at = datetime.now(UTC) - timedelta(seconds=time.monotonic() - claimed)
        spans = RunSpans(
            Tracing(RUNNER_SERVICE),
            spec,
            endpoint,
            parent=parent_from_env(environ),
            started_at=started_at,
        )
    except Exception:
        log.exception("run %d: its trace could not start; it runs untraced", spec.run_id)
        return None
    log.info("run %d: trace %s", spec.run_id, spans.trace_id)
    return spans


def close_run_trace(trace: RunTrace | None, run_id: int) -> None:
    if trace is None:
        return
    if not trace.close(FLUSH_TIMEOUT):
        log.warning(
            "run %d: its last spans were not exported within %g s; given up", run_id, FLUSH_TIMEOUT
        )
