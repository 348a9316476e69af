"""`achilles bench api`: one API replica (a real `achilles api` process: uvicorn, the
app, its pool) on a real PostgreSQL, callers signed in at the real OIDC provider.

`--size` is the number of runs (default 10 M); the rest scales with it as in
`achilles bench journal` (whose loader this reuses): owners = size/1000 (10 k), agents
= size/100 (100 k), and inbox items = size/10 (1 M). Items are generated in the
database with `generate_series`, written straight into the tables (the owner column
the trigger would set, given; no revision rows): most owners have a few dozen, the
owners of the lowest agent ids thousands (an agent is drawn as `random()^2`); 5 % of
the items are blocked, 20 % open, 75 % done. Measured:

- `GET /v1/inbox` (the first page, blocked first) for a sample of owners, the heaviest
  among them;
- `GET /v1/runs` first page and a deep page (a cursor 90 % down the history);
- a reply's commit -> the owner's `GET /v1/events` clients, with 1,000 streams of many
  owners connected to the process;
- token verification in-process (`OidcVerifier`, keys cached), with a real token.

Beside each: its ceiling. For the reads, the same statements the API sends (captured
from the service the router calls, with the same parameters) straight through one
psycopg connection; for events, NOTIFY -> LISTEN alone; for tokens, the RS256 signature
check alone. The reads' plans (EXPLAIN ANALYZE, BUFFERS) are kept in the result.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import jwt
import psycopg
from jwt.algorithms import RSAAlgorithm
from jwt.utils import base64url_decode
from sqlalchemy import text

from achilles.api.identity.caller import issuer_of
from achilles.api.identity.oidc import OidcVerifier
from achilles.api.pagination import encode_cursor
from achilles.api.routers.runs import OUTPUT_PREVIEW_CHARS
from achilles.db.database import Database
from achilles.db.inbox.replies import write_reply
from achilles.db.roles import Component
from achilles.domain.inbox import ReplyChannel, ReplyKind
from achilles.services import inbox as inbox_service
from achilles.services import owner_reads
from achilles.services.db_roles import grant_login_url
from achilles.services.owner_reads import RunFilter
from achilles_dev import oidc
from bench import api_data, api_processes, journal_data, sse
from bench.pg import bench_database
from bench.report import Progress, Report, at_most
from bench.sql import captured_sql, explain, table_sizes, timed

NAME = "api"
DEFAULT_SIZE = 10_000_000
PAGE = 50  # the API's default page size
SIGN_IN_THREADS = 8


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


# --- reads: the API against the same statements through psycopg -----------------------


def _captured(database: Database, work: Callable[[], object]) -> list[tuple[str, Any]]:
    with captured_sql(database) as statements:
        work()
    return [(sql, params) for sql, params in statements if sql.strip() != "SELECT 1"]


def _replay(conn: psycopg.Connection[Any], statements: list[tuple[str, Any]]) -> None:
    for sql, params in statements:
        conn.execute(sql, params).fetchall()
    conn.commit()


@dataclass(frozen=True)
class Read:
    """One measured request: its path and query, its caller, and the statements the
    service sends for it."""

    path: str
    params: dict[str, str]
    token: str
    statements: list[tuple[str, Any]]


def measure_reads(
    report: Report,
    name: str,
    reads: list[Read],
    samples: int,
    api: api_processes.ApiProcess,
    dsn: str,
    note: str,
) -> None:
    """`samples` requests round the `reads` (after one warm-up each), then their
    statements as many times through psycopg."""
    order = [reads[i % len(reads)] for i in range(samples)]
    latencies = []
    with httpx.Client(base_url=api.url, timeout=30.0) as client:
        for read in reads:
            _get(client, read)
        cpu_before = api.cpu_seconds()
        for read in order:
            latencies.append(timed(_get, client, read)[0])
        cpu = (api.cpu_seconds() - cpu_before) / samples
    ceiling = []
    with psycopg.connect(dsn) as conn:
        for read in reads:
            _replay(conn, read.statements)
        for read in order:
            ceiling.append(timed(_replay, conn, read.statements)[0])
    report.latency(name, latencies, goal=at_most(50, "ms"), note=note)
    report.add_value(
        f"{name}: the API process's CPU per request",
        cpu * 1000,
        "ms",
        note="user + system time of all its threads over the requests (/proc), whatever "
        "else the machine runs",
    )
    report.latency(
        f"{name}: ceiling (its statements through psycopg)",
        ceiling,
        note=f"{len(reads[0].statements)} statements, one transaction, one connection",
    )


def _get(client: httpx.Client, read: Read) -> None:
    response = client.get(
        read.path, params=read.params, headers={"Authorization": f"Bearer {read.token}"}
    )
    if response.status_code != 200:
        raise RuntimeError(f"GET {read.path} {read.params}: {response.status_code} {response.text}")


def _plan(database: Database, statements: list[tuple[str, Any]], contains: str) -> dict[str, Any]:
    sql, params = next((s, p) for s, p in statements if contains in s)
    return {"sql": " ".join(sql.split()), "plan": explain(database, sql, params)}


def measure_inbox(
    report: Report,
    database: Database,
    api: api_processes.ApiProcess,
    dsn: str,
    owners: list[api_data.Owner],
    sizes: Sizes,
    tokens: dict[str, str],
) -> None:
    reads = []
    for owner in owners:
        statements = _captured(
            database, partial(inbox_service.owner_inbox, database, owner.key, limit=PAGE)
        )
        reads.append(Read("/v1/inbox", {}, tokens[owner.key], statements))
    counts = sorted(owner.items for owner in owners)
    measure_reads(
        report,
        "GET /v1/inbox, first page",
        reads,
        sizes.read_samples,
        api,
        dsn,
        f"{len(owners)} owners holding {counts[0]:,}-{counts[-1]:,} items (the heaviest "
        f"among them); {PAGE} per page, blocked first",
    )
    report.details.setdefault("plans", {})["GET /v1/inbox"] = _plan(
        database, reads[0].statements, "agent_inbox_items"
    )


def measure_runs(
    report: Report,
    database: Database,
    api: api_processes.ApiProcess,
    dsn: str,
    owners: list[api_data.Owner],
    sizes: Sizes,
    tokens: dict[str, str],
) -> None:
    deep_id = max(2, sizes.runs // 10)  # 90 % of the history is newer than the cursor
    for label, before in (("first page", None), ("deep cursor page", deep_id)):
        reads = []
        for owner in owners:
            params = {} if before is None else {"cursor": encode_cursor("runs", before)}
            statements = _captured(
                database,
                partial(
                    owner_reads.runs_page,
                    database,
                    owner.key,
                    RunFilter(before_id=before),
                    agent_ref=None,
                    limit=PAGE + 1,
                    output_chars=OUTPUT_PREVIEW_CHARS,
                ),
            )
            reads.append(Read("/v1/runs", params, tokens[owner.key], statements))
        where = "newest" if before is None else f"below run {deep_id:,}"
        measure_reads(
            report,
            f"GET /v1/runs, {label}",
            reads,
            sizes.read_samples,
            api,
            dsn,
            f"{len(owners)} owners of {sizes.agents // sizes.owners} agents and "
            f"~{sizes.runs // sizes.owners:,} runs each; {PAGE} runs {where}",
        )
        plans = report.details.setdefault("plans", {})
        plans[f"GET /v1/runs, {label}"] = _plan(database, reads[0].statements, "LATERAL")


# --- token verification ----------------------------------------------------------------


def measure_tokens(
    report: Report, provider: oidc.RunningProvider, token: str, sizes: Sizes
) -> None:
    verifier = OidcVerifier(
        provider.issuer, provider.settings.api_audience, oidc.USER_CLAIM, ["RS256"]
    )

    def verify(checker: OidcVerifier) -> str:
        if issuer_of(token) != checker.issuer:  # the caller's choice of verifier, too
            raise RuntimeError("the provider's token names another issuer")
        return checker.user_key_of(token)

    verify(verifier)  # fetches discovery and the key set once: cached from here on
    # A verifier remembers tokens it verified: a fresh one (sharing the cached key set)
    # per sample checks the token in full, as on its first request.
    fresh = [
        OidcVerifier(
            provider.issuer,
            provider.settings.api_audience,
            oidc.USER_CLAIM,
            ["RS256"],
            keys=verifier.keys,
        )
        for _ in range(sizes.token_samples)
    ]
    report.latency(
        "token verification (JWKS cached)",
        [timed(verify, checker)[0] for checker in fresh],
        goal=at_most(1, "ms"),
        note="issuer_of + OidcVerifier.user_key_of on a real RS256 access token of the "
        "provider, the token not seen before: header, key lookup, signature, "
        "iss/aud/exp/nbf/iat, the user claim",
    )
    report.latency(
        "token verification: a token seen before",
        [timed(verify, verifier)[0] for _ in range(sizes.token_samples)],
        note="the verifier's memory of tokens it verified (SHA-256 of the token, the key "
        "still the issuer's; exp/nbf/iat checked on every use): a portal's or script's "
        "repeated token",
    )
    header = jwt.get_unverified_header(token)
    key = verifier.keys.key(header["kid"])
    if key is None:
        raise RuntimeError("the provider's key is not in its key set")
    signing_input, _, signature = token.rpartition(".")
    raw_signature = base64url_decode(signature)
    algorithm = RSAAlgorithm(RSAAlgorithm.SHA256)

    def signature_only() -> bool:
        return algorithm.verify(signing_input.encode(), key.key, raw_signature)

    if not signature_only():
        raise RuntimeError("the token's signature does not verify")
    report.latency(
        "token verification: ceiling (the RS256 signature check alone)",
        [timed(signature_only)[0] for _ in range(sizes.token_samples)],
    )


# --- events ------------------------------------------------------------------------------


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


# --- the whole ---------------------------------------------------------------------------


def run(size: int, json_path: Path | None, server_url: str | None = None) -> Report:
    progress = Progress(NAME)
    sizes = Sizes.for_runs(size)
    report = Report(benchmark=NAME, size=size, parameters=asdict(sizes))
    progress(f"sizes: {asdict(sizes)}")
    api_processes.raise_open_files_limit(4 * sizes.sse_clients + 1024)
    with (
        tempfile.TemporaryDirectory(prefix="achilles-bench-api-") as scratch,
        bench_database(progress, server_url) as target,
    ):
        workdir = Path(scratch)
        report.details["postgresql"] = target.server
        database = Database(target.url, pool_size=4, application_name="achilles-bench")
        try:
            loaded = journal_data.load(database, journal_data.Sizes.for_runs(size), progress)
            loaded["inbox_items_s"] = api_data.load_inbox(database, sizes, progress)
            report.details["load_seconds"] = loaded
            report.details["table_sizes"] = table_sizes(
                database, ("agent_runs", "agents", "users", "agent_inbox_items")
            )
            progress(f"tables: {report.details['table_sizes']}")
            count = max(sizes.read_owners, sizes.sse_owners)
            owners = api_data.owners_with_items(database, heaviest=5, count=count, seed=19)
            with api_processes.oidc_provider(workdir, progress) as provider:
                started = time.monotonic()
                keys = [owner.key for owner in owners]
                with ThreadPoolExecutor(SIGN_IN_THREADS) as pool:  # each sign-in is 5 requests
                    tokens = dict(zip(keys, pool.map(provider.token_for, keys), strict=True))
                progress(f"{len(tokens)} owners signed in ({time.monotonic() - started:.1f}s)")
                measure_tokens(report, provider, tokens[owners[0].key], sizes)
                progress("token verification measured")
                # The API connects as its own login, as installed (docs/operator.md).
                api_login = grant_login_url(
                    database, Component.API, "achilles_bench_api", secrets.token_urlsafe(32)
                )
                with api_processes.api_process(api_login, provider, workdir, progress) as api:
                    dsn = target.libpq_dsn()
                    readers = owners[: sizes.read_owners]
                    measure_inbox(report, database, api, dsn, readers, sizes, tokens)
                    progress("GET /v1/inbox measured")
                    measure_runs(report, database, api, dsn, readers, sizes, tokens)
                    progress("GET /v1/runs measured")
                    measure_events(
                        report,
                        database,
                        api,
                        dsn,
                        owners[: sizes.sse_owners],
                        sizes,
                        tokens,
                        progress,
                    )
                    progress("events measured")
        finally:
            database.dispose()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
