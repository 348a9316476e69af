"""Events of `achilles bench api`: a reply's commit -> the owner's `GET /v1/events`
clients, with many owners' streams connected to one API process, beside its ceiling,
NOTIFY -> LISTEN alone.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import text

from achilles.db.database import Database
from achilles.db.inbox.replies import write_reply
from achilles.domain.inbox import ReplyChannel, ReplyKind
from bench import api_data, api_processes, sse
from bench.api_data import Sizes
from bench.report import Progress, Report, at_most


def _reply(database: Database, item_id: int, number: int) -> float:
    """A reply through the inbox's own write; when its commit returned."""
    with database.transaction() as session:
        write_reply(
            session,
            item_id,
            f"Approve the oldest first ({number}).",
            ReplyKind.ANSWER,
            ReplyChannel.INBOX,
            by="bench",
        )
    return time.perf_counter()


async def _events_run(
    api: api_processes.ApiProcess,
    database: Database,
    sizes: Sizes,
    owners: list[api_data.Owner],
    items: dict[str, int],
    tokens: dict[str, str],
    progress: Progress,
) -> tuple[list[float], int]:
    host, port = api.url.removeprefix("http://").rsplit(":", 1)
    clients = [
        sse.EventClient(owner.key, tokens[owner.key])
        for number in range(sizes.sse_clients)
        for owner in [owners[number % len(owners)]]
    ]
    started = time.monotonic()
    await sse.connect(host, int(port), clients, parallel=50, timeout=60.0)
    progress(
        f"{len(clients):,} event streams of {len(owners):,} owners ready "
        f"({time.monotonic() - started:.1f}s)"
    )
    by_owner: dict[str, list[sse.EventClient]] = {}
    for client in clients:
        by_owner.setdefault(client.owner, []).append(client)
    latencies: list[float] = []
    try:
        for number in range(sizes.sse_replies):
            owner = owners[number % len(owners)]
            item_id = items[owner.key]
            waits = [client.expect(item_id) for client in by_owner[owner.key]]
            committed = await asyncio.to_thread(_reply, database, item_id, number)
            arrived = await asyncio.wait_for(asyncio.gather(*waits), timeout=30.0)
            latencies += [at - committed for at in arrived]
            for client in by_owner[owner.key]:
                client.seen.pop(item_id, None)
        leaked = sum(
            1 for client in clients for item_id in client.seen if items.get(client.owner) != item_id
        )
    finally:
        await sse.disconnect(clients)
    return latencies, leaked


def measure_events(
    report: Report,
    database: Database,
    api: api_processes.ApiProcess,
    dsn: str,
    owners: list[api_data.Owner],
    sizes: Sizes,
    tokens: dict[str, str],
    progress: Progress,
) -> None:
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT DISTINCT ON (user_id) user_id, id FROM agent_inbox_items "
                "WHERE user_id = ANY(:owners) ORDER BY user_id, (state <> 'blocked'), id"
            ),
            {"owners": [owner.id for owner in owners]},
        ).all()
    first_item = {int(row[0]): int(row[1]) for row in rows}
    items = {owner.key: first_item[owner.id] for owner in owners}
    latencies, leaked = asyncio.run(
        _events_run(api, database, sizes, owners, items, tokens, progress)
    )
    if leaked:
        raise RuntimeError(f"{leaked} events reached another owner's stream")
    per_owner = sizes.sse_clients // len(owners)
    report.latency(
        "reply commit -> the owner's SSE clients",
        latencies,
        unit="ms",
        goal=at_most(250, "ms"),
        note=f"{sizes.sse_clients:,} streams open ({len(owners):,} owners, {per_owner}+ each); "
        f"{sizes.sse_replies} replies, each timed at every stream of its owner; no event "
        "reached another owner's stream",
    )
    report.latency(
        "reply commit -> SSE: ceiling (NOTIFY -> LISTEN alone)",
        sse.notify_listen_latencies(dsn, sizes.sse_replies),
        note="pg_notify committed on one psycopg connection, read by a thread on another",
    )
