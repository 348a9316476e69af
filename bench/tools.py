"""`achilles bench tools`: what an MCP tool call costs a run, and reply -> approved call
(issue 38; docs/tools.md, docs/performance.md).

Against the registry's `@modelcontextprotocol/server-everything` over streamable HTTP
(`achilles_dev.mcp_servers`, cached under ~/.cache/achilles/mcp) and a real, durable
PostgreSQL:

- **Overhead per call.** The server's own latency is a `tools/call` of `echo` on a session
  already open (one round trip, the SDK client's work included); the runner's is the same
  call as a run makes it (`tools/mcp.py`: on the run's session with the server, kept on
  its own event-loop thread, the arguments' digest, the result's cap). A run's first call
  of a server, which opens that session, is reported apart. Reported: both series, and
  the ratio runner / server at p50 and p99; the server's series is taken in two halves
  around the runner's, so a drift of the machine's load moves both alike.
- **Reply -> approved call made.** An approval pending (`echo` under `approval: always`),
  the owner approves (`services/tool_approvals.decide`: the guarded UPDATE, the item's
  reply, one transaction), then what the woken run does at its start before the model
  (`tools/approvals.start_note`: expire, claim, make the call, record, tell). Measured from
  the decision's start to the outcome recorded. Not included: the wake's way to the run's
  pod (the annotation, the operator, the Job, the pod's start), which
  `achilles bench burst-vs-cronjob` measures for any run.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

import anyio
from sqlalchemy import text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal import runs as journal
from achilles.db.journal.agents import create_agent
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import (
    APPROVAL_TTL,
    ListedTool,
    OfferedTool,
    RunSource,
    arguments_digest,
    function_name,
)
from achilles.domain.runs import RunTrigger
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue, tool_approvals
from achilles.tools import approvals as run_approvals
from achilles.tools.base import ToolContext
from achilles.tools.mcp import McpConnections, McpTool
from achilles_dev import mcp_servers
from bench.pg import bench_database
from bench.report import Progress, Report, at_most, percentile

NAME = "tools"
DEFAULT_SIZE = 200
WARM_UP = 10
APPROVALS = 30
ECHO = {"message": "the quick brown fox jumps over the lazy dog"}
REPLY_TO_CALL_GOAL_S = 5.0


def _open_session_calls(url: str, count: int) -> list[float]:
    """`count` calls of echo on one open session: the server's own latency."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    samples: list[float] = []

    async def measure() -> None:
        async with Client(streamable_http_client(url), cache=None) as client:
            for _ in range(count):
                started = time.perf_counter()
                await client.call_tool("echo", ECHO)
                samples.append(time.perf_counter() - started)

    anyio.run(measure)
    return samples


def _context(database: Database, run_id: int, agent_id: int, user_id: int) -> ToolContext:
    from zoneinfo import ZoneInfo

    def transaction() -> AbstractContextManager[Session]:
        return database.transaction()

    return ToolContext(
        run_id=run_id,
        agent_id=agent_id,
        owner_user_id=user_id,
        owner_timezone=ZoneInfo("UTC"),
        knowledge=None,  # type: ignore[arg-type]
        transaction=transaction,
        now=lambda: datetime.now(UTC),
    )


def _echo_source(url: str, tool_id: int, catalogue_name: str, *, approval: bool) -> RunSource:
    echo = ListedTool("echo", "Echoes back the input string", {"type": "object"}, True, False)
    offered = OfferedTool(function_name(catalogue_name, "echo"), echo, approval)
    return RunSource(tool_id, catalogue_name, url, (), 30, 16384, (offered,))


def _overhead(report: Report, url: str, size: int, progress: Callable[[str], None]) -> None:
    source = _echo_source(url, 1, "everything", approval=False)
    arguments = json.dumps(ECHO)
    ctx = _context(None, 0, 0, 0)  # type: ignore[arg-type]
    # A run's first call of a server opens the run's session with it (what a call cost
    # before the sessions were kept: one per call).
    first: list[float] = []
    for _ in range(max(1, size // 10)):
        connections = McpConnections()
        tool = McpTool(source, source.offered[0], {}, connections=connections)
        started = time.perf_counter()
        tool.call(arguments, ctx)
        first.append(time.perf_counter() - started)
        connections.close()
    connections = McpConnections()
    tool = McpTool(source, source.offered[0], {}, connections=connections)
    _open_session_calls(url, WARM_UP)
    for _ in range(WARM_UP):
        tool.call(arguments, ctx)
    # The server's series in two halves around the runner's, so a drift of the machine's
    # load over the benchmark moves both alike.
    server = _open_session_calls(url, size // 2)
    runner: list[float] = []
    for n in range(size):
        started = time.perf_counter()
        result = tool.call(arguments, ctx)
        runner.append(time.perf_counter() - started)
        assert result.error is None, result.error
        if (n + 1) % 50 == 0:
            progress(f"{n + 1} runner calls")
    server += _open_session_calls(url, size - size // 2)
    connections.close()
    server.sort()
    runner.sort()
    report.latency("server's own latency per call (open session)", server, on="median")
    report.latency("runner's time per MCP call (the run's session)", runner, on="median")
    report.latency("a run's first call of a server (opens its session)", first, on="median")
    for label, at in (("p50", 0.5), ("p99", 0.99)):
        ratio = _at(runner, at) / _at(server, at)
        report.add_value(f"runner / server latency, {label}", ratio, "x")
    report.add_value(
        "runner's overhead per call, p50", (_at(runner, 0.5) - _at(server, 0.5)) * 1000, "ms"
    )


def _at(values: list[float], fraction: float) -> float:
    return percentile(values, fraction)


def _reply_to_call(
    report: Report, admin: Database, url: str, count: int, progress: Callable[[str], None]
) -> None:
    spec = AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": url, "approval": "always"}}
    )
    tool_id = catalogue.mirror_tool(admin, "bench-echo", spec).tool_id
    source = _echo_source(url, tool_id, "bench-echo", approval=True)
    with admin.transaction() as session:
        user_id = session.execute(
            text("INSERT INTO users (key) VALUES ('bench-owner') RETURNING id")
        ).scalar_one()
        # Never called: the runs exist for the approvals' bookkeeping only.
        session.execute(
            text(
                "INSERT INTO agent_models (name, base_url, provider_model)"
                " VALUES ('bench-model', 'http://127.0.0.1:9/v1', 'none')"
            )
        )
    samples: list[float] = []
    for n in range(count):
        with admin.transaction() as session:
            agent_id = create_agent(
                session, owner_key="bench-owner", name=f"bench-{n}", prompt="p",
                model_name="bench-model",
            )  # fmt: skip
            item = board.ask(session, agent_id, f"approval-{n}", "May I echo?").item
            now = session.execute(text("SELECT now()")).scalar_one()
            approvals.create_approval(
                session, agent_id=agent_id, tool_id=tool_id, item_id=item.id,
                mcp_tool="echo", arguments=ECHO, digest=arguments_digest(ECHO), reason=None,
                run_id=0, expires_at=now + APPROVAL_TTL,
            )  # fmt: skip
            run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id
        ctx = _context(admin, run_id, agent_id, user_id)
        started = time.perf_counter()
        decided = tool_approvals.decide(
            admin, item.id, tool_approvals.Decision.APPROVE, requester=None
        )
        assert decided.accepted
        note = run_approvals.start_note(ctx, (source,), {})
        samples.append(time.perf_counter() - started)
        assert note is not None
        assert '"outcome": "executed"' in note, note
        if (n + 1) % 10 == 0:
            progress(f"{n + 1} approvals decided and made")
    report.latency(
        "reply -> approved call made (decision + the run's start settling)",
        samples,
        unit="s",
        goal=at_most(REPLY_TO_CALL_GOAL_S, "s"),
        note="without the wake's way to the pod (annotation, operator, Job, pod start)",
    )


def run(size: int, json_path: Path | None, server_url: str | None = None) -> Report:
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={"calls": size, "approvals": APPROVALS, "server": "server-everything"},
    )
    with tempfile.TemporaryDirectory(prefix="achilles-bench-mcp-") as workdir:
        server = mcp_servers.start_everything(Path(workdir))
        report.details["mcp_server"] = {
            "package": "@modelcontextprotocol/server-everything",
            "version": mcp_servers.EVERYTHING_VERSION,
            "url": server.url,
        }
        try:
            progress("overhead per call")
            _overhead(report, server.url, size, progress)
            with bench_database(progress, server_url) as target:
                report.details["postgresql"] = target.server
                admin = Database(target.url, pool_size=2, application_name="achilles-bench")
                try:
                    progress("reply -> approved call made")
                    _reply_to_call(report, admin, server.url, min(APPROVALS, size), progress)
                finally:
                    admin.dispose()
        finally:
            server.stop()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
