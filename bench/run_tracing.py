"""What a run's trace costs the runner, off and on (issue 21): figures of
`achilles bench run-steps`.

- Off (no OTLP endpoint, the default): what the runner imports of OpenTelemetry, in a
  fresh interpreter that imports the runner's whole stack (`runner/execution.py`) and asks
  for a run's trace as `execute` does: nothing is the goal. And the runner's CPU per step
  recorded through `StepJournal` with no trace: its only trace code is one `if`.
- On: the same steps, each also made a span (`telemetry/run_spans.py`) and queued for the
  batch exporter (its export, on a thread of its own, to a port where nothing listens, is
  not counted: a collector's answer would not be either).

No database: `record_step` writes nothing (the steps ride on the run's next write, which
`bench/run_steps.py` measures).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import cast

from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.domain.run_trace import Step
from achilles.domain.runs import RunTrigger
from achilles.runner.steps import StepJournal, StepObserver
from achilles.services.run_journal import RunJournal
from bench.report import Report, at_most

RUNS = 400
MODEL_CALLS = 25  # each followed by a tool call: 50 steps, within the journal's cap

_IMPORTS_OFF = """
import json, os, sys, time
from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.runner import execution
from achilles.runner.tracing import start_run_trace
spec = RunSpec(1, "manual", 1, "bench", "p", 1, "o", "UTC", None, (), "p", 5, 60)
trace = start_run_trace(spec, ModelEndpoint("m", "http://m/v1", "m", False),
                        claimed=time.monotonic(), environ=os.environ)
print(json.dumps({"trace": trace is not None,
                  "modules": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def _opentelemetry_imported_when_off() -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTS_OFF], env=env, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert result["trace"] is False
    return list(result["modules"])


def _spec() -> RunSpec:
    return RunSpec(
        run_id=1,
        trigger=RunTrigger.MANUAL,
        agent_id=1,
        agent_name="bench-agent",
        prompt="Summarise my week.",
        owner_user_id=1,
        owner_key="bench-owner",
        owner_timezone="UTC",
        model=None,
        tool_implementations=(),
        platform_prompt="",
        max_iterations=MODEL_CALLS + 1,
        run_timeout_seconds=600,
    )


def _cpu_per_step(steps: tuple[Step, Step], observer: object | None) -> float:
    """Seconds of this thread's CPU per step recorded, over RUNS runs of 50 steps (the
    exporter's thread is not counted)."""
    nowhere = cast(RunJournal, None)  # record_step never writes
    cpu = 0.0
    for _ in range(RUNS):
        spans = observer() if callable(observer) else None
        journal = StepJournal(nowhere, 1, observer=cast(StepObserver | None, spans))
        started = time.thread_time()
        for _ in range(MODEL_CALLS):
            journal.record_step(steps[0])
            journal.record_step(steps[1])
        cpu += time.thread_time() - started
    return cpu / (RUNS * 2 * MODEL_CALLS)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tracing_figures(report: Report, steps: tuple[Step, Step]) -> None:
    imported = _opentelemetry_imported_when_off()
    report.add_value(
        "OpenTelemetry modules a runner imports, tracing off",
        float(len(imported)),
        "modules",
        goal=at_most(0, "modules"),
        note="a fresh interpreter: the runner's whole stack imported and its trace asked for,"
        " no OTEL_* endpoint" + (f": {', '.join(imported)}" if imported else ""),
    )
    off = _cpu_per_step(steps, None)
    report.add_value(
        "runner CPU per step recorded, tracing off",
        1000 * off,
        "ms",
        note=f"StepJournal.record_step alone, {RUNS} runs of 50 steps (no database)",
    )

    from achilles.telemetry.provider import Tracing
    from achilles.telemetry.run_spans import RunSpans

    # Its export fails (nothing listens) and its queue overflows: said once, here.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)

    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{_closed_port()}"
    try:
        tracing = Tracing("achilles-bench")
    finally:
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    endpoint = ModelEndpoint("bench-model", "http://llm.internal/v1", "gpt-small", False)

    def run_spans() -> RunSpans:
        return RunSpans(tracing, _spec(), endpoint, parent=None, started_at=datetime.now(UTC))

    on = _cpu_per_step(steps, run_spans)
    tracing.close(1.0)
    report.add_value(
        "runner CPU per step recorded, tracing on",
        1000 * on,
        "ms",
        note="the same, each step also a span handed to the batch exporter (its queue of"
        " 2,048 overflows: the spans past it are dropped at the same cost; its export, on"
        " its own thread to a port where nothing listens, not counted)",
    )
