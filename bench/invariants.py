"""`achilles bench invariants`: what the seed's invariant monitor costs beside a benchmark
(issue 36 item 10; `achilles_dev/invariants.py`). Database only.

A journal of `--size` agents (one owner per ten, 1 % with the owner's switch off, so the
runs of closed agents are read on every sample) and `--week-runs` runs finished this week
(the budget week's tokens are what grows with the journal), made with `generate_series`
and VACUUM ANALYZEd. The monitor then samples it as it does beside a cluster benchmark,
every 0.5 s for `--seconds`, with no pods to list (the API server's side is each cluster
benchmark's own row: `invariants held (... a sample X ms ...)`). Figures: a sample's wall
time; how often and how long the week's tokens and the answered replies were read; the
CPU of the monitor's thread (the benchmark's process does nothing else meanwhile) and of
its PostgreSQL backend (`/proc`, a server on this machine); and the transactions
PostgreSQL counted in the database against the monitor's own count, which `kept-jobs`
and `intake` take off theirs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from achilles_dev.invariants import InvariantMonitor
from bench.pg import bench_database
from bench.report import Progress, Report, at_most

NAME = "invariants"
DEFAULT_SIZE = 10_000
DEFAULT_SECONDS = 60.0
AGENTS_PER_OWNER = 10
CLOSED_PERCENT = 1

_USERS = "INSERT INTO users (key, active) SELECT 'owner-' || g, true FROM generate_series(1, %s) g"
_MODEL = (
    "INSERT INTO agent_models (name, base_url, provider_model)"
    " VALUES ('bench', 'http://127.0.0.1:9/v1', 'bench') RETURNING id"
)
_AGENTS = """
INSERT INTO agents (user_id, name, prompt, model_id, enabled)
SELECT 1 + (g - 1) %% %(owners)s, 'agent-' || g, 'Summarise my week.', %(model)s,
       g %% 100 >= %(closed)s
FROM generate_series(1, %(agents)s) g
"""
_RUNS = """
INSERT INTO agent_runs (agent_id, trigger, state, output, tokens_used, started_at,
                        finished_at, heartbeat_at, created_at)
SELECT 1 + (g - 1) %% %(agents)s, 'scheduled', 'succeeded', 'done', 100,
       now() - interval '2 hours', now() - (g %% 3600) * interval '1 second',
       now() - interval '2 hours', now() - interval '2 hours'
FROM generate_series(1, %(runs)s) g
"""
_TRANSACTIONS = (
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
)


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process on this machine; None when it is not here."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _transactions(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(_TRANSACTIONS).fetchone()
    assert row is not None
    return int(str(row[0]))


def run(
    size: int,
    json_path: Path | None,
    server_url: str | None = None,
    *,
    week_runs: int | None = None,
    seconds: float = DEFAULT_SECONDS,
) -> Report:
    progress = Progress(NAME)
    runs = 10 * size if week_runs is None else week_runs
    owners = max(1, size // AGENTS_PER_OWNER)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "agents": size,
            "owners": owners,
            "closed_percent": CLOSED_PERCENT,
            "runs_finished_this_week": runs,
            "seconds": seconds,
        },
    )
    with bench_database(progress, server_url) as database:
        dsn = database.libpq_dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_USERS, (owners,))
            model = conn.execute(_MODEL).fetchone()
            assert model is not None
            conn.execute(
                _AGENTS,
                {"owners": owners, "model": model[0], "closed": CLOSED_PERCENT, "agents": size},
            )
            conn.execute(_RUNS, {"agents": size, "runs": runs})
            conn.execute("VACUUM ANALYZE")
            progress(f"{size:,} agents, {owners:,} owners, {runs:,} runs this week")
            # The set-up's own counts reach the statistics within a second or so.
            time.sleep(2)
            _transactions(conn)
            time.sleep(2)
            counted_before = _transactions(conn)
            monitor = InvariantMonitor(dsn, list)
            cpu_before = time.process_time()
            started = time.monotonic()
            monitor.start()
            time.sleep(min(1.0, seconds / 4))  # its connection is made at its first sample
            backend = monitor.backend_pid()
            backend_before = None if backend is None else _cpu_seconds(backend)
            backend_started = time.monotonic()
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
            backend_after = None if backend is None else _cpu_seconds(backend)
            backend_seconds = time.monotonic() - backend_started
            verdict = monitor.stop()
            elapsed = time.monotonic() - started
            cpu = time.process_time() - cpu_before
            time.sleep(2)
            counted = _transactions(conn) - counted_before - 1  # less this reading
    report.details["verdict"] = verdict.line()
    report.latency("a sample (journal only), wall", monitor.sample_seconds, on="median")
    if monitor.slow_seconds:
        report.latency(
            "of which the week's tokens and the answered replies, when read",
            monitor.slow_seconds,
            on="median",
            note=f"read at {verdict.slow_checks} of {verdict.samples} samples",
        )
    report.add_value(
        "monitor thread CPU", cpu / elapsed, "cores", note="the benchmark's process, idle else"
    )
    if backend_before is not None and backend_after is not None:
        report.add_value(
            "its PostgreSQL backend CPU",
            (backend_after - backend_before) / backend_seconds,
            "cores",
            goal=at_most(0.02, "cores"),
        )
    report.add_value("samples", verdict.samples, "")
    report.add_value(
        "transactions PostgreSQL counted, less the monitor's own",
        counted - monitor.transactions,
        "tx",
        note=f"{counted} counted, {monitor.transactions} begun by the monitor",
    )
    if verdict.violations:
        report.notes.extend(verdict.violations)
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
