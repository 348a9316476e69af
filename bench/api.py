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
import psycopg

from achilles.api.pagination import encode_cursor
from achilles.api.runs.schemas import OUTPUT_PREVIEW_CHARS
from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.services import inbox as inbox_service
from achilles.services import journal_reads
from achilles.services.db_roles import grant_login_url
from achilles.services.journal_reads import RunFilter
from bench import api_data, api_processes, journal_data
from bench.api_data import Sizes
from bench.api_events import measure_events
from bench.api_tokens import measure_tokens
from bench.pg import bench_database
from bench.report import Progress, Report, at_most
from bench.sql import captured_sql, explain, table_sizes, timed

NAME = "api"
DEFAULT_SIZE = 10_000_000
PAGE = 50  # the API's default page size
SIGN_IN_THREADS = 8


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
                    journal_reads.runs_page,
                    database,
                    RunFilter(before_id=before),
                    owner_key=owner.key,
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
