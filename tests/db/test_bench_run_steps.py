"""`achilles bench run-steps` at a tiny size, so the benchmark cannot rot: it replays runs
as the runner's login on the real PostgreSQL, writes its JSON and markdown, and drops its
database. No time is asserted (wall-clock numbers belong to docs/performance.md); the
write counts are exact, so they are; WAL bytes are not (below)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import run_steps


def test_run_steps_benchmark_runs_reports_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "run-steps.json"
    run_steps.run(2, out, server_url=postgres_server.url())

    result = json.loads(out.read_text())
    figures = {figure["name"]: figure for figure in result["figures"]}
    assert figures["cost per step recorded"]["goal"]["text"] == "<= 2 ms"
    assert figures["tokens write carrying 2 steps"]["series"]["count"] == 2 * 25
    # A 50-step run: the claim, 25 tokens writes and the outcome, with steps or without.
    assert figures["write transactions per run, without steps"]["value"] == 27
    assert figures["write transactions per run, with steps"]["value"] == 27
    # WAL is read from the server's WAL position, which every database of the server moves:
    # here the session's server, shared with the other tests' writers (the cluster tier's
    # operators under xdist), so only its presence is checked; the benchmark's own server
    # has no other writer.
    for kind in ("without", "with"):
        assert figures[f"WAL per run, {kind} steps"]["value"] > 0
    # The run's trace: off, not one OpenTelemetry module imported; on, every step a span.
    assert figures["OpenTelemetry modules a runner imports, tracing off"]["value"] == 0
    assert figures["runner CPU per step recorded, tracing on"]["value"] > 0
    assert "| cost per step recorded |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
