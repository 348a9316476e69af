"""`achilles bench retention` at a tiny size, so the benchmark cannot rot: it loads finished
runs with outputs and steps on the real PostgreSQL, measures their bytes, lets the
retention pass delete the year-old half, writes its JSON and markdown, and drops its
database. No time is asserted (wall-clock numbers belong to docs/performance.md); the
counts are exact, so they are."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import retention


def test_retention_benchmark_measures_deletes_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "retention.json"
    retention.run(1200, out, server_url=postgres_server.url(), output_bytes=500, steps=4)

    figures = {figure["name"]: figure for figure in json.loads(out.read_text())["figures"]}
    assert figures["agent_runs bytes per run (heap, TOAST, indexes)"]["value"] > 500
    assert figures["agent_run_steps bytes per run (4 steps)"]["value"] > 0
    older = figures["runs older than the retention"]["value"]
    assert 550 <= older <= 650  # half of two years, give or take the load's seconds
    assert figures["runs deleted by the retention passes"]["value"] == older
    assert figures["retention: one batch (its transaction)"]["series"]["count"] >= 2
    assert "| journal bytes per run |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
