"""The data of `achilles bench api`: its sizes, inbox items over the journal's agents,
written straight into the tables with `generate_series` (bench/api.py describes the
layout), and the owners the benchmark reads as.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from sqlalchemy import text

from achilles.db.database import Database
from bench import journal_data
from bench.report import Progress


@dataclass(frozen=True)
class Sizes:
    runs: int
    owners: int
    agents: int
    items: int
    read_owners: int  # owners whose inbox and runs are read
    read_samples: int  # requests per measured figure
    sse_clients: int
    sse_owners: int
    sse_replies: int
    token_samples: int

    @classmethod
    def for_runs(cls, runs: int) -> Sizes:
        base = journal_data.Sizes.for_runs(runs)
        large = runs >= 1_000_000
        clients = min(1000, max(8, runs // 10_000))
        return cls(
            runs=runs,
            owners=base.owners,
            agents=base.agents,
            items=max(100, runs // 10),
            read_owners=min(base.owners, 50),
            read_samples=1000 if large else 60,
            sse_clients=clients,
            sse_owners=min(base.owners, max(2, clients // 4)),
            sse_replies=200 if large else 12,
            token_samples=5000 if large else 200,
        )


_BOARDS = """
INSERT INTO agent_inbox_boards (agent_id, board_version)
SELECT id, 1 FROM agents
"""

# One question per row; the owner is the agent's (agent g belongs to owner 1 + (g-1) % owners,
# journal's layout), written here because the owner trigger is off for the bulk load.
_ITEMS = """
INSERT INTO agent_inbox_items (agent_id, user_id, key, state, question, context, revision,
                               created_at, updated_at)
SELECT agent_id, 1 + (agent_id - 1) % :owners, 'question-' || g,
       CASE WHEN r < 0.05 THEN 'blocked' WHEN r < 0.15 THEN 'tracked'
            WHEN r < 0.20 THEN 'partial' WHEN r < 0.25 THEN 'missing' ELSE 'done' END,
       'Which of these invoices should I approve first? (' || g || ')',
       'Three invoices arrived today; the oldest is due on Friday.',
       1, at, at
FROM (
    SELECT g, random() AS r, 1 + floor(power(random(), 2) * :agents)::bigint AS agent_id,
           now() - interval '365 days' + (g::float8 / :items) * interval '365 days' AS at
    FROM generate_series(1, CAST(:items AS bigint)) AS g
) AS s
"""


def _secondary_indexes(database: Database, table: str) -> list[tuple[str, str]]:
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                "AND tablename = :table AND indexname NOT IN ("
                "SELECT conname FROM pg_constraint WHERE conrelid = CAST(:table AS regclass))"
            ),
            {"table": table},
        ).all()
    return [(row[0], row[1]) for row in rows]


def load_inbox(database: Database, sizes: Sizes, progress: Progress) -> float:
    started = time.monotonic()
    indexes = _secondary_indexes(database, "agent_inbox_items")
    with database.engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(_BOARDS))
        for name, _ in indexes:
            conn.execute(text(f'DROP INDEX "{name}"'))
        conn.execute(
            text(_ITEMS), {"owners": sizes.owners, "agents": sizes.agents, "items": sizes.items}
        )
    progress(f"{sizes.items:,} inbox items ({time.monotonic() - started:.1f}s)")
    with database.engine.begin() as conn:
        conn.execute(text("SET LOCAL maintenance_work_mem = '512MB'"))
        for _, definition in indexes:
            conn.execute(text(definition))
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) agent_inbox_boards"))
        conn.execute(text("VACUUM (ANALYZE) agent_inbox_items"))
    took = time.monotonic() - started
    progress(f"inbox indexes rebuilt, VACUUM ANALYZE done ({took:.1f}s)")
    return took


@dataclass(frozen=True)
class Owner:
    id: int
    key: str
    items: int


def owners_with_items(database: Database, heaviest: int, count: int, seed: int) -> list[Owner]:
    """The `heaviest` owners by items, then random other owners with items, `count` in all."""
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT u.id, u.key, c.n FROM (SELECT user_id, count(*) AS n "
                "FROM agent_inbox_items GROUP BY user_id) AS c JOIN users u ON u.id = c.user_id "
                "ORDER BY c.n DESC, u.id"
            )
        ).all()
    owners = [Owner(row[0], row[1], row[2]) for row in rows]
    rest = owners[heaviest:]
    random.Random(seed).shuffle(rest)
    return (owners[:heaviest] + rest)[:count]
