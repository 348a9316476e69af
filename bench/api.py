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
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from achilles.db.database import Database
from achilles.db.inbox.replies import write_reply
from achilles.domain.inbox import ReplyChannel, ReplyKind
from achilles.services import inbox as inbox_service
from achilles.services import owner_reads
from achilles.services.owner_reads import RunFilter
from achilles_dev import oidc
from bench import journal, sse
from bench.pg import bench_database
from bench.report import Progress, Report, at_most
from bench.sql import captured_sql, explain, timed

NAME = "api"
DEFAULT_SIZE = 10_000_000
PAGE = 50  # the API's default page size
START_TIMEOUT_S = 60.0


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
        base = journal.Sizes.for_runs(runs)
        large = runs >= 1_000_000
        clients = min(1000, max(8, runs // 10_000))
        return cls(
            runs=runs,
            owners=base.owners,
            agents=base.agents,
            items=max(100, runs // 10),
            read_owners=min(base.owners, 50),
            read_samples=2000 if large else 60,
            sse_clients=clients,
            sse_owners=min(base.owners, max(2, clients // 4)),
            sse_replies=200 if large else 12,
            token_samples=5000 if large else 200,
        )


# --- data -----------------------------------------------------------------------------

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


def _table_sizes(database: Database) -> dict[str, str]:
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
                "WHERE relname IN ('agent_runs', 'agents', 'users', 'agent_inbox_items') "
                "ORDER BY relname"
            )
        ).all()
    return {row[0]: row[1] for row in rows}


@dataclass(frozen=True)
class Owner:
    id: int
    key: str
    items: int


def _owners_with_items(database: Database, heaviest: int, count: int, seed: int) -> list[Owner]:
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


# --- the processes --------------------------------------------------------------------


@contextmanager
def oidc_provider(workdir: Path, progress: Progress) -> Iterator[oidc.RunningProvider]:
    port = oidc.free_port()
    settings = oidc.ProviderSettings(issuer=f"http://127.0.0.1:{port}", listen=f"127.0.0.1:{port}")
    running = oidc.start(settings, log=workdir / "oidc-provider.log")
    progress(f"OIDC provider at {running.issuer}")
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def api_process(
    database_url: str, provider: oidc.RunningProvider, workdir: Path, progress: Progress
) -> Iterator[str]:
    """`achilles api` in a process of its own, as the chart runs it; its base URL."""
    port = oidc.free_port()
    env = {
        **os.environ,
        "ACHILLES_DATABASE_URL": database_url,
        "ACHILLES_API_OIDC_ISSUER": provider.issuer,
        "ACHILLES_API_OIDC_AUDIENCE": provider.settings.api_audience,
        "ACHILLES_API_OIDC_USER_CLAIM": oidc.USER_CLAIM,
    }
    for name in ("ACHILLES_API_WEB_CLIENT_ID", "ACHILLES_API_KUBE_AUDIENCE", "KUBECONFIG"):
        env.pop(name, None)
    command = [str(Path(sys.executable).with_name("achilles")), "api", "--host", "127.0.0.1"]
    log = workdir / "api.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(url):
            if process.poll() is not None:
                raise RuntimeError(f"achilles api exited ({process.returncode}): {_tail(log)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"achilles api did not answer in {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)  # a probe's poll interval
        progress(f"achilles api (pid {process.pid}) at {url}")
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-20:])


def _raise_open_files_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


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
    report: Report, name: str, reads: list[Read], samples: int, api: str, dsn: str, note: str
) -> None:
    """`samples` requests round the `reads` (after one warm-up each), then their
    statements as many times through psycopg."""
    order = [reads[i % len(reads)] for i in range(samples)]
    latencies = []
    with httpx.Client(base_url=api, timeout=30.0) as client:
        for read in reads:
            _get(client, read)
        for read in order:
            latencies.append(timed(_get, client, read)[0])
    ceiling = []
    with psycopg.connect(dsn) as conn:
        for read in reads:
            _replay(conn, read.statements)
        for read in order:
            ceiling.append(timed(_replay, conn, read.statements)[0])
    report.latency(name, latencies, goal=at_most(50, "ms"), note=note)
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
    api: str,
    dsn: str,
    owners: list[Owner],
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
    api: str,
    dsn: str,
    owners: list[Owner],
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
        plans[f"GET /v1/runs, {label}: the page's rows"] = _plan(
            database, reads[0].statements, "agent_runs.id IN"
        )


# --- token verification ----------------------------------------------------------------


def measure_tokens(
    report: Report, provider: oidc.RunningProvider, token: str, sizes: Sizes
) -> None:
    verifier = OidcVerifier(
        provider.issuer, provider.settings.api_audience, oidc.USER_CLAIM, ["RS256"]
    )

    def verify() -> str:
        if issuer_of(token) != verifier.issuer:  # the caller's choice of verifier, too
            raise RuntimeError("the provider's token names another issuer")
        return verifier.user_key_of(token)

    verify()  # fetches discovery and the key set once: cached from here on
    samples = [timed(verify)[0] for _ in range(sizes.token_samples)]
    report.latency(
        "token verification (JWKS cached)",
        samples,
        goal=at_most(1, "ms"),
        note="issuer_of + OidcVerifier.user_key_of on a real RS256 access token of the "
        "provider: header, key lookup, signature, iss/aud/exp/nbf/iat, the user claim",
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
    api: str,
    database: Database,
    sizes: Sizes,
    owners: list[Owner],
    items: dict[str, int],
    tokens: dict[str, str],
    progress: Progress,
) -> tuple[list[float], int]:
    host, port = api.removeprefix("http://").rsplit(":", 1)
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
    api: str,
    dsn: str,
    owners: list[Owner],
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
    _raise_open_files_limit(4 * sizes.sse_clients + 1024)
    with (
        tempfile.TemporaryDirectory(prefix="achilles-bench-api-") as scratch,
        bench_database(progress, server_url) as target,
    ):
        workdir = Path(scratch)
        report.details["postgresql"] = target.server
        database = Database(target.url, pool_size=4, application_name="achilles-bench")
        try:
            loaded = journal.load(database, journal.Sizes.for_runs(size), progress)
            loaded["inbox_items_s"] = load_inbox(database, sizes, progress)
            report.details["load_seconds"] = loaded
            report.details["table_sizes"] = _table_sizes(database)
            progress(f"tables: {report.details['table_sizes']}")
            count = max(sizes.read_owners, sizes.sse_owners)
            owners = _owners_with_items(database, heaviest=5, count=count, seed=19)
            with oidc_provider(workdir, progress) as provider:
                started = time.monotonic()
                tokens = {owner.key: provider.token_for(owner.key) for owner in owners}
                progress(f"{len(tokens)} owners signed in ({time.monotonic() - started:.1f}s)")
                measure_tokens(report, provider, tokens[owners[0].key], sizes)
                progress("token verification measured")
                with api_process(target.url, provider, workdir, progress) as api:
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
