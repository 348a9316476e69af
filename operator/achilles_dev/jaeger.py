"""A Jaeger v2 process for the trace tests: OTLP over HTTP in, spans kept in memory, a
trace fetched by its id from the query API.

Built by `achilles_dev.jaeger_build`; started with a configuration of our own (only the
OTLP/HTTP receiver, the memory store, the query API and the health check, each on a port
the kernel reported free, or the receiver on an address given), so two sessions on one
machine never share one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from achilles.errors import LocalStackError
from achilles_dev.jaeger_build import ensure_jaeger_built
from achilles_dev.ports import free_port
from achilles_dev.processes import ProcessRef, is_alive, reference, stop_group
from achilles_dev.waiting import wait_until

START_TIMEOUT = 60.0

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health_port}
receivers:
  otlp:
    protocols:
      http:
        endpoint: {otlp_host}:{otlp_port}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


@dataclass(frozen=True)
class Span:
    """One span of a fetched trace, as the tests look at it."""

    span_id: str
    name: str
    service: str
    parent_id: str | None
    attributes: dict[str, Any]
    error: bool


@dataclass
class RunningJaeger:
    process: ProcessRef
    otlp_endpoint: str  # http://host:port, what OTEL_EXPORTER_OTLP_ENDPOINT takes
    query_url: str
    log: Path

    def trace(self, trace_id: str) -> list[Span] | None:
        """The spans of a trace (None: not received, or not yet)."""
        response = httpx.get(f"{self.query_url}/api/traces/{trace_id}", timeout=10)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data = response.json().get("data") or []
        return _spans(data[0]) if data else None

    def traces_of(self, service: str, lookback_seconds: float = 3600.0) -> list[list[Span]]:
        """The traces holding a span of `service` that started within the lookback, each
        whole (every service's spans of it)."""
        end = time.time()
        params: dict[str, str | int] = {
            "service": service,
            "start": int((end - lookback_seconds) * 1_000_000),
            "end": int((end + 60) * 1_000_000),
            "limit": 1000,
        }
        response = httpx.get(f"{self.query_url}/api/traces", params=params, timeout=10)
        response.raise_for_status()
        return [_spans(trace) for trace in response.json().get("data") or []]

    def stop(self) -> None:
        stop_group(self.process, grace=5.0, what="Jaeger")


def _spans(trace: dict[str, Any]) -> list[Span]:
    services = {key: process["serviceName"] for key, process in trace["processes"].items()}
    spans = []
    for span in trace["spans"]:
        parents = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        attributes = {tag["key"]: tag["value"] for tag in span.get("tags", [])}
        spans.append(
            Span(
                span_id=span["spanID"],
                name=span["operationName"],
                service=services[span["processID"]],
                parent_id=parents[0] if parents else None,
                attributes=attributes,
                error=attributes.get("error") is True,
            )
        )
    return spans


def start_jaeger(workdir: Path, *, otlp_host: str = "127.0.0.1") -> RunningJaeger:
    """Build Jaeger if needed, start it in `workdir` and wait until it is healthy; its
    OTLP receiver listens on `otlp_host` (an address a run pod reaches, for the cluster)."""
    binary = ensure_jaeger_built(report=lambda line: print(line, flush=True))
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {
        "otlp_port": free_port(otlp_host),
        "query_port": free_port(),
        "query_grpc_port": free_port(),
        "health_port": free_port(),
    }
    config = workdir / "jaeger.yaml"
    config.write_text(_CONFIG.format(otlp_host=otlp_host, **ports))
    log = workdir / "jaeger.log"
    with log.open("ab") as output:
        popen = subprocess.Popen(
            [str(binary), "--config", f"file:{config}"],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
            start_new_session=True,
        )
    process = reference(popen.pid) or ProcessRef(pid=popen.pid, start_ticks=-1)
    running = RunningJaeger(
        process=process,
        otlp_endpoint=f"http://{otlp_host}:{ports['otlp_port']}",
        query_url=f"http://127.0.0.1:{ports['query_port']}",
        log=log,
    )
    health = f"http://127.0.0.1:{ports['health_port']}/status"

    def healthy() -> bool:
        if popen.poll() is not None:
            raise LocalStackError(
                f"Jaeger exited at start (exit {popen.returncode}); its log {log}:\n"
                + log.read_text()[-4000:]
            )
        try:
            response = httpx.get(health, timeout=2)
            status = json.loads(response.text) if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return False
        return bool(status)

    try:
        wait_until(healthy, timeout=START_TIMEOUT, what=f"Jaeger's health check at {health}")
    except LocalStackError:
        if is_alive(process):
            running.stop()
        raise
    return running
