"""`achilles bench retention`: what a run costs the journal on disk, and how fast the
retention pass deletes old runs (issue 22).

On a real PostgreSQL migrated to the newest schema: `--size` finished runs spread over
the last two years (100 owners, 1,000 agents), each with an output of `--output-bytes`
of word-like text (compressible as prose is, not as a repeated string) and `--steps`
steps (half model calls, half tool calls, as a run records them since issue 21). Loaded
as a restore would (row triggers off for the load), then VACUUM ANALYZE.

- Bytes per run: `pg_total_relation_size` (heap, TOAST, every index) of `agent_runs`
  and of `agent_run_steps`, divided by the runs; the year at 100,000 agents follows.
- Retention: `runRetentionDays: 365`, then the operator's pass (`services/retention.py`,
  500 runs per statement and transaction, steps cascading) repeated until nothing is
  left; runs deleted per second, and each batch's time (the longest any row lock is
  held).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from achilles.db.database import Database
from achilles.services.retention import RETENTION_BATCH, apply_retention
from bench.pg import bench_database
from bench.report import Progress, Report

NAME = "retention"
DEFAULT_SIZE = 100_000
DEFAULT_OUTPUT_BYTES = 2000
DEFAULT_STEPS = 10
OWNERS = 100
AGENTS = 1000
LOAD_CHUNK = 20_000
RETENTION_DAYS = 365
# The estimate's company: 100,000 agents running hourly on average.
YEAR_RUNS_AT_100K_AGENTS = 100_000 * 24 * 365
WORDS = [
    *("the", "week", "report", "team", "release", "search", "document", "owner", "deploy"),
    *("review", "incident", "customer", "budget", "summary", "change", "quarter"),
    *("roadmap", "metric", "backlog", "meeting", "decision"),
]

_OWNERS = "INSERT INTO users (key) SELECT 'owner-' || g FROM generate_series(1, :n) AS g"
_MODEL = (
    "INSERT INTO agent_models (name, base_url, provider_model)"
    " VALUES ('m', 'http://127.0.0.1:1/v1', 'm') RETURNING id"
)
_AGENTS = """
INSERT INTO agents (user_id, name, prompt, model_id)
SELECT 1 + (g - 1) % :owners, 'agent-' || g, 'Summarise what changed for me this week.', :model
FROM generate_series(1, CAST(:agents AS bigint)) AS g
"""
# Finished runs, oldest first, evenly over two years; the output a sentence of words
# drawn per row (the subquery refers to the row, so it is drawn again for each).
_RUNS = """
INSERT INTO agent_runs (agent_id, trigger, state, output, tokens_used, started_at,
                        finished_at, heartbeat_at, created_at)
SELECT 1 + g % :agents, 'scheduled', 'succeeded',
       (SELECT string_agg((CAST(:words AS text[]))[1 + floor(random() * :nwords)::int], ' ')
        FROM generate_series(1, greatest(1, :output_bytes / 7)) AS w WHERE g > 0),
       500 + g % 1500, at, at, at, at - interval '1 minute'
FROM (SELECT g, now() - interval '730 days' * (1 - g::float8 / :total) AS at
      FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS g) AS s
"""
_STEPS = """
INSERT INTO agent_run_steps (run_id, seq, kind, started_at, ended_at, latency_ms, model,
                             input_tokens, output_tokens, finish_reason, tool, status,
                             argument_bytes, result_bytes)
SELECT r.id, s,
       CASE WHEN s % 2 = 1 THEN 'model_call' ELSE 'tool_call' END,
       r.started_at, r.started_at, 120.5,
       CASE WHEN s % 2 = 1 THEN 'gpt-small' END,
       CASE WHEN s % 2 = 1 THEN 800 END, CASE WHEN s % 2 = 1 THEN 60 END,
       CASE WHEN s % 2 = 1 THEN 'tool_calls' END,
       CASE WHEN s % 2 = 0 THEN 'search_knowledge' END, CASE WHEN s % 2 = 0 THEN 'ok' END,
       CASE WHEN s % 2 = 0 THEN 42 END, CASE WHEN s % 2 = 0 THEN 2300 END
FROM agent_runs r CROSS JOIN generate_series(1, :steps) AS s
WHERE r.id BETWEEN :low AND :high
"""
_SIZE = "SELECT pg_total_relation_size(CAST(:table AS regclass))"


def _load(admin: Database, size: int, output_bytes: int, steps: int, progress: Progress) -> None:
    with admin.engine.begin() as conn:
        conn.execute(text(_OWNERS), {"n": OWNERS})
        model = conn.execute(text(_MODEL)).scalar_one()
        conn.execute(text(_AGENTS), {"owners": OWNERS, "agents": AGENTS, "model": model})
    for low in range(1, size + 1, LOAD_CHUNK):
        high = min(size, low + LOAD_CHUNK - 1)
        with admin.engine.begin() as conn:
            # As a restore would: the row triggers (owner events, notifications) off.
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            conn.execute(
                text(_RUNS),
                {
                    "agents": AGENTS,
                    "words": WORDS,
                    "nwords": len(WORDS),
                    "output_bytes": output_bytes,
                    "total": size,
                    "low": low,
                    "high": high,
                },
            )
            if steps:
                conn.execute(text(_STEPS), {"steps": steps, "low": low, "high": high})
        progress(f"{high:,}/{size:,} runs loaded")
    with admin.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))


def _bytes(admin: Database, table: str) -> int:
    with admin.engine.connect() as conn:
        return int(conn.execute(text(_SIZE), {"table": table}).scalar_one())


def run(
    size: int,
    json_path: Path | None,
    server_url: str | None = None,
    *,
    output_bytes: int = DEFAULT_OUTPUT_BYTES,
    steps: int = DEFAULT_STEPS,
) -> Report:
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "runs": size,
            "output_bytes": output_bytes,
            "steps_per_run": steps,
            "owners": OWNERS,
            "agents": AGENTS,
            "retention_days": RETENTION_DAYS,
            "batch": RETENTION_BATCH,
        },
    )
    with bench_database(progress, server_url) as target:
        report.details["postgresql"] = target.server
        admin = Database(target.url, pool_size=2, application_name="achilles-bench")
        try:
            _load(admin, size, output_bytes, steps, progress)
            _size_figures(report, admin, size, steps)
            _retention_figures(report, admin, size, progress)
        finally:
            admin.dispose()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report


def _size_figures(report: Report, admin: Database, size: int, steps: int) -> None:
    runs = _bytes(admin, "agent_runs") / size
    step_bytes = _bytes(admin, "agent_run_steps") / size
    report.add_value(
        "agent_runs bytes per run (heap, TOAST, indexes)",
        round(runs),
        "bytes",
        note="pg_total_relation_size after VACUUM ANALYZE, / runs",
    )
    report.add_value(f"agent_run_steps bytes per run ({steps} steps)", round(step_bytes), "bytes")
    per_run = runs + step_bytes
    report.add_value("journal bytes per run", round(per_run), "bytes")
    report.add_value(
        "a year at 100,000 agents, hourly (876 M runs)",
        round(per_run * YEAR_RUNS_AT_100K_AGENTS / 1e12, 2),
        "TB",
    )


def _retention_figures(report: Report, admin: Database, size: int, progress: Progress) -> None:
    with admin.engine.begin() as conn:
        conn.execute(
            text("UPDATE platform_settings SET agent_run_retention_days = :days"),
            {"days": RETENTION_DAYS},
        )
        older = int(
            conn.execute(
                text("SELECT count(*) FROM agent_runs WHERE finished_at < now() - :age"),
                {"age": timedelta(days=RETENTION_DAYS)},
            ).scalar_one()
        )
    batches: list[float] = []
    deleted = 0
    started = time.monotonic()
    while True:
        # One batch per pass: each batch timed alone (a pass runs up to 20 in a row).
        before = time.monotonic()
        done = apply_retention(admin, max_batches=1)
        batches.append(time.monotonic() - before)
        deleted += done.runs_deleted
        if not done.more_left:
            break
        if len(batches) % 50 == 0:
            progress(f"retention: {deleted:,}/{older:,} runs deleted")
    took = time.monotonic() - started
    left = _bytes(admin, "agent_runs")
    report.add_value("runs older than the retention", older, "runs")
    report.add_value("runs deleted by the retention passes", deleted, "runs")
    report.add_value(
        "retention: runs deleted per second (steps with them)",
        round(deleted / took) if took else 0,
        "runs/s",
        note=f"{len(batches)} passes of one {RETENTION_BATCH}-run batch each, back to back",
    )
    report.latency("retention: one batch (its transaction)", batches, on="p99")
    report.add_value("agent_runs bytes after (before VACUUM gives space back)", left, "bytes")
    report.notes.append(
        "Deleting leaves dead tuples that autovacuum makes reusable; the files shrink only"
        " with VACUUM FULL or pg_repack, so a steady retention keeps the table near one"
        " retention period of runs."
    )
