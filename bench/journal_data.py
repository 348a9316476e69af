"""The journal benchmark's data: a year of runs at production size, generated in the
database (`generate_series`), indexed and VACUUM ANALYZEd as autovacuum would leave it;
and the disjoint blocks of agent ids its measurements take."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import text

from achilles.db.database import Database
from bench.report import Progress

ROUNDS = 3  # alternating rounds of raw and gated enqueues; bursts of due agents
LOAD_CHUNK = 1_000_000
OUTPUT_TEXT = "x" * 100  # a short answer inline in the row; long ones would be TOASTed


@dataclass(frozen=True)
class Sizes:
    runs: int
    owners: int
    agents: int
    running: int
    due: int
    enqueue_per_round: int
    samples: int
    repeats: int

    @classmethod
    def for_runs(cls, runs: int) -> Sizes:
        owners = max(5, runs // 1000)
        agents = max(60, runs // 100)
        running = max(10, agents // 10)
        due = max(5, min(1000, agents // 20))
        free = agents - running - ROUNDS * due - 1  # 1: the probe of one enqueue's SQL
        return cls(
            runs=runs,
            owners=owners,
            agents=agents,
            running=running,
            due=due,
            enqueue_per_round=max(3, min(5000, free // (2 * ROUNDS))),
            samples=2000 if runs >= 1_000_000 else 100,
            repeats=200 if runs >= 1_000_000 else 5,
        )


_AGENTS = """
INSERT INTO agents (user_id, name, prompt, schedule, model_id, next_run_at, schedule_zone)
SELECT 1 + (g - 1) % :owners, 'agent-' || g, 'Summarise what changed for me this week.',
       CASE WHEN g % 2 = 0
            THEN jsonb_build_object('type', 'interval', 'every_hours', 1 + g % 24)
            ELSE jsonb_build_object('type', 'calendar', 'cadence', 'daily',
                                    'time', lpad((g % 24)::text, 2, '0') || ':'
                                            || lpad((g % 60)::text, 2, '0'))
       END,
       :model, now() + interval '1 hour' + (g % 86400) * interval '1 second', 'UTC'
FROM generate_series(1, CAST(:agents AS bigint)) AS g
"""

# A year of finished runs in time order (90 % succeeded, 5 % failed, 5 % skipped).
_HISTORY = """
INSERT INTO agent_runs (agent_id, trigger, state, reason, output, tokens_used, error,
                        started_at, finished_at, heartbeat_at, created_at, scheduled_for)
SELECT agent_id,
       CASE WHEN g % 10 = 0 THEN 'manual' ELSE 'scheduled' END,
       CASE WHEN r < 0.90 THEN 'succeeded' WHEN r < 0.95 THEN 'failed' ELSE 'skipped' END,
       CASE WHEN r < 0.90 THEN NULL WHEN r < 0.94 THEN 'error' WHEN r < 0.95 THEN 'stale'
            WHEN r < 0.99 THEN 'already_running' ELSE 'budget_exceeded' END,
       CASE WHEN r < 0.90 THEN :output END,
       CASE WHEN r < 0.95 THEN 500 + floor(random() * 5000)::bigint ELSE 0 END,
       CASE WHEN r >= 0.90 AND r < 0.95 THEN 'model endpoint returned 503' END,
       CASE WHEN r < 0.95 THEN fin - interval '2 minutes' END,
       fin,
       CASE WHEN r < 0.95 THEN fin - interval '30 seconds' END,
       CASE WHEN r < 0.95 THEN fin - interval '2 minutes 1 second' ELSE fin END,
       CASE WHEN g % 10 <> 0 THEN fin - interval '2 minutes 1 second' END
FROM (
    SELECT g, random() AS r, 1 + floor(random() * :agents)::bigint AS agent_id,
           now() - interval '365 days' + (g::float8 / :runs) * interval '365 days' AS fin
    FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS g
) AS s
"""

RUNNING_ROWS_SQL = """
INSERT INTO agent_runs (agent_id, trigger, state, started_at, heartbeat_at, created_at,
                        dispatched_at, scheduled_for)
SELECT g, 'scheduled', 'running', now() - interval '10 minutes',
       CASE WHEN g % 100 = 0 THEN now() - interval '5 minutes'
            ELSE now() - interval '5 seconds' END,
       now() - interval '10 minutes', now() - interval '10 minutes', now() - interval '10 minutes'
FROM generate_series(1, CAST(:running AS bigint)) AS g
"""


def _secondary_indexes(database: Database) -> list[tuple[str, str]]:
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                "AND tablename = 'agent_runs' AND indexname NOT IN ("
                "SELECT conname FROM pg_constraint WHERE conrelid = 'agent_runs'::regclass)"
            )
        ).all()
    return [(row[0], row[1]) for row in rows]


def load(database: Database, sizes: Sizes, progress: Progress) -> dict[str, float]:
    """Owners, agents and a year of history; returns the seconds each step took."""
    took: dict[str, float] = {}
    started = time.monotonic()
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (key) "
                "SELECT 'owner-' || g FROM generate_series(1, CAST(:n AS bigint)) g"
            ),
            {"n": sizes.owners},
        )
        model = conn.execute(
            text(
                "INSERT INTO agent_models (name, base_url, provider_model) "
                "VALUES ('bench', 'http://127.0.0.1:9/v1', 'bench') RETURNING id"
            )
        ).scalar_one()
        conn.execute(
            text(_AGENTS), {"owners": sizes.owners, "agents": sizes.agents, "model": model}
        )
        first, last = conn.execute(text("SELECT min(id), max(id) FROM users")).one()
        if (first, last) != (1, sizes.owners):  # the SQL above assumes ids 1..owners
            raise RuntimeError(f"user ids {first}..{last}, expected 1..{sizes.owners}")
    took["owners_and_agents_s"] = time.monotonic() - started
    progress(
        f"{sizes.owners:,} owners, {sizes.agents:,} agents ({took['owners_and_agents_s']:.1f}s)"
    )

    # Bulk load as a restore would: secondary indexes built afterwards, row triggers
    # (the NOTIFY on insert) and FK checks off for the load only.
    indexes = _secondary_indexes(database)
    started = time.monotonic()
    with database.engine.begin() as conn:
        for name, _ in indexes:
            conn.execute(text(f'DROP INDEX "{name}"'))
    for low in range(1, sizes.runs + 1, LOAD_CHUNK):
        high = min(sizes.runs, low + LOAD_CHUNK - 1)
        with database.engine.begin() as conn:
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            conn.execute(
                text(_HISTORY),
                {
                    "agents": sizes.agents,
                    "runs": sizes.runs,
                    "low": low,
                    "high": high,
                    "output": OUTPUT_TEXT,
                },
            )
        progress(f"agent_runs history: {high:,}/{sizes.runs:,} rows")
    took["history_rows_s"] = time.monotonic() - started
    started = time.monotonic()
    with database.engine.begin() as conn:
        conn.execute(text("SET LOCAL maintenance_work_mem = '512MB'"))
        for name, definition in indexes:
            conn.execute(text(definition))
            progress(f"index {name} rebuilt")
    took["indexes_s"] = time.monotonic() - started
    started = time.monotonic()
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) agent_runs"))
        conn.execute(text("VACUUM (ANALYZE) agents"))
        conn.execute(text("VACUUM (ANALYZE) users"))
    took["vacuum_analyze_s"] = time.monotonic() - started
    progress(f"VACUUM ANALYZE done ({took['vacuum_analyze_s']:.1f}s)")
    return took


@dataclass
class AgentBlocks:
    """Disjoint ranges of agent ids, so no measurement meets another's active run."""

    next_id: int

    def take(self, count: int) -> list[int]:
        block = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return block
