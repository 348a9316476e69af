"""`achilles bench api` at a tiny size, so the benchmark cannot rot: a real `achilles api`
process, the real OIDC provider and PostgreSQL, every measurement run, its JSON and
markdown written, its database dropped. No figure is asserted (wall-clock numbers
belong to docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from achilles_dev.postgres import LocalPostgres
from bench import api


def test_api_benchmark_runs_reports_and_cleans_up(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    out = tmp_path / "api.json"
    api.run(2000, out, server_url=postgres_server.url())

    result = json.loads(out.read_text())
    figures = {figure["name"]: figure for figure in result["figures"]}
    assert {
        "GET /v1/inbox, first page",
        "GET /v1/inbox, first page: ceiling (its statements through psycopg)",
        "GET /v1/runs, first page",
        "GET /v1/runs, deep cursor page",
        "reply commit -> the owner's SSE clients",
        "reply commit -> SSE: ceiling (NOTIFY -> LISTEN alone)",
        "token verification (JWKS cached)",
    } <= set(figures)
    sizes = result["parameters"]
    assert figures["GET /v1/inbox, first page"]["series"]["count"] == sizes["read_samples"]
    # Every reply reached every stream of its owner (each stream is one sample).
    replies = figures["reply commit -> the owner's SSE clients"]["series"]["count"]
    assert replies >= sizes["sse_replies"]
    assert {"GET /v1/inbox", "GET /v1/runs, deep cursor page"} <= set(result["details"]["plans"])
    assert "Execution Time" in result["details"]["plans"]["GET /v1/inbox"]["plan"]
    assert len(result["commit"]["commit"]) == 40
    assert "| GET /v1/runs, first page |" in out.with_suffix(".md").read_text()
    with psycopg.connect(postgres_server.libpq_dsn(), autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        assert left.fetchall() == []
