"""`achilles bench journal` at a tiny size, so the benchmark cannot rot: it runs every
measurement against the real PostgreSQL, writes its JSON and markdown, and drops its
database. No figure is asserted (wall-clock numbers belong to docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import journal


def test_journal_benchmark_runs_reports_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "journal.json"
    journal.run(2000, out, server_url=postgres_server.url())

    result = json.loads(out.read_text())
    names = {figure["name"] for figure in result["figures"]}
    assert {
        "enqueue: gates / raw",
        "budget query (last complete week)",
        "reaper sweep",
        "due-agent scan, none due",
    } <= names
    assert all(f["value"] >= 0 for f in result["figures"])
    assert {"budget query (last complete week)", "reaper sweep"} <= set(result["details"]["plans"])
    assert result["machine"]["cores"] >= 1
    assert len(result["commit"]["commit"]) == 40
    assert "| reaper sweep |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
