"""`achilles bench tools` at a tiny size, so the benchmark cannot rot: a real
server-everything, the real PostgreSQL, its JSON and markdown written, its database
dropped. No time is asserted (the figures belong to docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import tools


def test_tools_benchmark_runs_reports_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "tools.json"
    tools.run(4, out, server_url=postgres_server.url())

    result = json.loads(out.read_text())
    figures = {figure["name"]: figure for figure in result["figures"]}
    assert figures["server's own latency per call (open session)"]["series"]["count"] == 4
    assert figures["runner's time per MCP call (the run's session)"]["series"]["count"] == 4
    assert figures["a run's first call of a server (opens its session)"]["series"]["count"] == 1
    assert figures["runner / server latency, p99"]["value"] > 0
    reply = figures["reply -> approved call made (decision + the run's start settling)"]
    assert reply["series"]["count"] == 4
    assert reply["goal"]["text"] == "<= 5 s"
    assert "| runner / server latency, p50 |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
