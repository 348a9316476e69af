"""The cluster benchmarks at a tiny size, so they cannot rot: each starts its own control
plane, runs the operator, measures, writes its JSON and markdown, and removes what it
made. No figure is asserted (wall-clock numbers belong to docs/performance.md); what is
checked is that each measured what it says and cleaned up. burst-vs-cronjob and intake
run on a control plane without a node (no root needed); steady-state and
slot-to-heartbeat on the real node (root only, like the other real-node tests)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from achilles_dev.postgres import LocalPostgres, default_data_root
from bench import burst, heartbeat, intake, steady
from bench.report import INVARIANTS_FIGURE
from tests.conftest import session_postgres

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


def _result(path: Path) -> dict[str, Any]:
    """The benchmark's JSON, its markdown beside it, and the invariant monitor's verdict
    in both: it watched the benchmark (samples) and saw no violation (issue 36 item 10)."""
    result: dict[str, Any] = json.loads(path.read_text())
    markdown = path.with_suffix(".md").read_text()
    assert markdown.startswith(f"### {result['benchmark']}")
    watched = result["details"]["invariants"]
    assert watched["samples"] > 0, watched
    assert watched["violations"] == [], watched
    verdict = _figures(result)[INVARIANTS_FIGURE]
    assert (verdict["value"], verdict["met"]) == (0, True), verdict
    assert f"invariants held ({watched['samples']} samples" in markdown
    return result


def _figures(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {figure["name"]: figure for figure in result["figures"]}


def _bench_state(server: LocalPostgres) -> set[str]:
    """This process's benchmarks' control-plane directories, servers of their own (both
    named by the process: another run beside it is not this one's leftover) and the
    databases that exist now on this module's server."""
    pid = os.getpid()
    state = {str(p) for p in Path(tempfile.gettempdir()).glob(f"achilles-bench-{pid}-*/stack")}
    state |= {str(p) for p in default_data_root().glob(f"bench-{pid}-*")}
    with psycopg.connect(server.libpq_dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'achilles_bench%'")
        state |= {str(row[0]) for row in rows}
    return state


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[LocalPostgres]:
    """A server on loopback of this module's own: the benchmarks' stacks are their own,
    so the cluster tier's (tests/cluster/conftest.py), on the session stack's node
    network, is not started for them."""
    with session_postgres() as server:
        yield server


@pytest.fixture
def leaves_nothing(postgres_server: LocalPostgres) -> Iterator[None]:
    before = _bench_state(postgres_server)
    yield
    assert _bench_state(postgres_server) - before == set()


def test_burst_vs_cronjob(
    postgres_server: LocalPostgres, tmp_path: Path, leaves_nothing: None
) -> None:
    out = tmp_path / "burst.json"
    burst.run(3, out, postgres_server.url(), lead_s=5)
    figures = _figures(_result(out))
    assert figures["achilles: slot -> Job (watch event)"]["series"]["count"] == 3
    assert figures["cronjob: slot -> Job (watch event)"]["series"]["count"] == 3
    assert "achilles / cronjob, p99 (watch event)" in figures


@pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root")
def test_steady_state_on_the_real_node(tmp_path: Path, leaves_nothing: None) -> None:
    out = tmp_path / "steady.json"
    steady.run(12, out, rate=2, duration=3, idle_window_s=2)
    result = _result(out)
    assert result["parameters"]["node"] == "containerd (real)"
    figures = _figures(result)
    assert figures["slot -> Job (watch event)"]["series"]["count"] == 6
    assert figures["operator RSS, 12 Agents"]["value"] > 0
    assert result["details"]["runs by state"] == {"succeeded": 6}


def test_intake(postgres_server: LocalPostgres, tmp_path: Path, leaves_nothing: None) -> None:
    out = tmp_path / "intake.json"
    intake.run(20, out, postgres_server.url(), idle_window_s=2, memory_probe=True)
    result = _result(out)
    figures = _figures(result)
    assert figures["restart -> all reconciled"]["value"] > 0
    assert figures["restart: operator CPU until drained"]["value"] > 0
    # One Agent changed, one deleted and one added while no operator ran: the changed and
    # the added one are reconciled, the 18 others cost nothing.
    assert figures["restart: listed Agents unchanged"]["value"] == 18
    assert figures["restart: listed Agents reconciled"]["value"] == 2
    # Their two status writes came back as watch events, told apart as the operator's own.
    events = result["details"]["Agent events during the restart"]
    assert events.get("modified/echo", 0) >= 2, events
    assert figures["the API server alone: list 20 Agents in pages of 500, decoded"]["value"] > 0
    assert figures["RSS after malloc_trim(0), after the restart"]["value"] > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root")
def test_slot_to_heartbeat_on_the_real_node(tmp_path: Path, leaves_nothing: None) -> None:
    out = tmp_path / "heartbeat.json"
    heartbeat.run(2, out)
    result = _result(out)
    figures = _figures(result)
    assert result["parameters"]["node"] == "containerd (real)"
    assert figures["slot -> first heartbeat, p99"]["series"]["count"] == 2
    assert figures["Job -> container started"]["series"]["count"] == 2
    assert figures["container started -> first heartbeat"]["series"]["count"] == 2
    assert result["details"]["runs by state"] == {"succeeded": 2}
