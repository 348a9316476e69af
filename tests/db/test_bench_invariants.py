"""`achilles bench invariants` at a tiny size, so the benchmark cannot rot: it makes a
journal, runs the invariant monitor over it, writes its JSON and markdown, and drops its
database. No time is asserted (wall-clock numbers belong to docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import invariants


def test_invariants_benchmark_runs_reports_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "invariants.json"
    invariants.run(200, out, server_url=postgres_server.url(), week_runs=50, seconds=3)

    result = json.loads(out.read_text())
    figures = {figure["name"]: figure for figure in result["figures"]}
    samples = int(figures["samples"]["value"])
    assert samples >= 3  # every 0.5 s for 3 s, and the last one at its stop
    assert figures["a sample (journal only), wall"]["series"]["count"] == samples
    # The tokens and the wakes: read at the first sample and the last, and between as
    # their cost allows (every sample unless the machine is slow).
    slow = figures["of which the week's tokens and the answered replies, when read"]
    assert 2 <= slow["series"]["count"] <= samples
    assert figures["its PostgreSQL backend CPU"]["value"] >= 0  # the server is on this host
    assert result["details"]["verdict"].startswith(f"invariants held ({samples} samples")
    assert "| a sample (journal only), wall |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
