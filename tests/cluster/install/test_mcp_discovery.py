"""An admin adds an MCP server with kubectl and sees its tools in status (issue 38): the
chart's CRD, the real operator process, the registry's server-everything over streamable
HTTP (on this machine, where the operator process runs).

Status (`mcpTools`, `toolCount`, `schemaDigest`), `Ready`, the Events, and `kubectl get
agenttools`' columns; an unreachable server and an unreadable credential Secret are
reported, not crashed on."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from achilles.handlers.config import MCP_RELIST_EVERY
from achilles_dev import mcp_servers
from achilles_dev.mcp_servers import McpServer
from achilles_dev.ports import free_port, release
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.install.operator_support import OperatorProcess, running_operator
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

EVENTS_NAMESPACE = "default"  # where the operator posts Events of cluster-scoped objects
RELIST_SECONDS = 5


@pytest.fixture(scope="module")
def operator(
    cluster: Cluster, achilles_release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("mcp-discovery") / "operator.log"
    # The sweeper lists every MCP source again at this period (300 s by default).
    with running_operator(
        cluster, achilles_release, log, ACHILLES_MCP_RELIST_SECONDS=str(RELIST_SECONDS)
    ) as process:
        yield process


def _tool(name: str, url: str, **mcp: Any) -> dict[str, Any]:
    return {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "AgentTool",
        "metadata": {"name": name},
        "spec": {"implementation": "mcp", "mcp": {"url": url, **mcp}},
    }


def _ready(api: Achilles, name: str) -> dict[str, Any] | None:
    status = api.get("AgentTool", name).get("status") or {}
    for condition in status.get("conditions", []):
        if condition["type"] == "Ready" and condition.get("reason") != "Mirrored":
            return dict(condition)
    return None


def _events(cluster: Cluster, name: str) -> list[tuple[str, str, str]]:
    return [
        (str(event.type), str(event.reason), str(event.message))
        for event in cluster.core.list_namespaced_event(EVENTS_NAMESPACE).items
        if event.involved_object.kind == "AgentTool" and event.involved_object.name == name
    ]


def _kubectl(cluster: Cluster, *args: str) -> str:
    done = subprocess.run(
        [str(bin_dir() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_an_admin_adds_an_mcp_server_and_sees_its_tools(
    cluster: Cluster,
    admin_api: Achilles,
    operator: OperatorProcess,
    mcp_everything: McpServer,
) -> None:
    name = f"everything-{uuid.uuid4().hex[:6]}"
    admin_api.apply(_tool(name, mcp_everything.url, allowedTools=["echo", "get-sum"]))
    try:
        ready = wait_for(lambda: _ready(admin_api, name), 60, what="the listing's Ready")
        assert (ready["status"], ready["reason"]) == ("True", "ToolsListed"), operator.log()
        status = admin_api.get("AgentTool", name)["status"]
        tools = {tool["name"]: tool for tool in status["mcpTools"]}
        assert {"echo", "get-sum", "gzip-file-as-resource"} <= set(tools)
        assert status["toolCount"] == 2
        assert tools["echo"] == {
            "name": "echo",
            "description": tools["echo"]["description"],
            "readOnly": True,
            "destructive": False,
            "allowed": True,
            "approval": "never",
        }
        assert tools["gzip-file-as-resource"]["allowed"] is False
        assert status["schemaDigest"].startswith("sha256:")
        events = wait_for(lambda: _events(cluster, name), 30, what="the listing's Event")
        assert (
            events[0][0],
            events[0][1],
            events[0][2][: len("listed: 2 of")],
        ) == ("Normal", "McpToolsListed", "listed: 2 of")
        table = _kubectl(cluster, "get", "agenttool", name)
        header, row = table.splitlines()[:2]
        assert header.split()[:6] == [
            "NAME", "IMPLEMENTATION", "AGENTS-ALLOWED", "SOURCE", "TOOLS", "READY",
        ]  # fmt: skip
        assert row.split()[:6] == [name, "mcp", "true", "mcp", "2", "True"]
    finally:
        admin_api.delete("AgentTool", name)


def test_an_unreachable_server_and_an_unreadable_secret_are_reported(
    cluster: Cluster, admin_api: Achilles, operator: OperatorProcess, tmp_path: Path
) -> None:
    closed = free_port("127.0.0.1")
    gone = f"gone-{uuid.uuid4().hex[:6]}"
    guarded = f"guarded-{uuid.uuid4().hex[:6]}"
    headers = [{"name": "Authorization", "secretKeyRef": {"name": "not-listed", "key": "k"}}]
    try:
        admin_api.apply(_tool(gone, f"http://127.0.0.1:{closed}/mcp", timeoutSeconds=5))
        admin_api.apply(_tool(guarded, "http://127.0.0.1:9/mcp", headers=headers))
        down = wait_for(lambda: _ready(admin_api, gone), 60, what="the unreachable Ready")
        assert (down["status"], down["reason"]) == ("False", "ServerUnreachable")
        assert f"127.0.0.1:{closed}" in down["message"]
        warned = wait_for(lambda: _events(cluster, gone), 30, what="the Warning")
        assert warned[0][:2] == ("Warning", "McpServerUnreachable")
        locked = wait_for(lambda: _ready(admin_api, guarded), 60, what="the credentials' Ready")
        assert (locked["status"], locked["reason"]) == ("False", "CredentialsUnavailable")
        assert "not-listed" in locked["message"]
        assert operator.process is not None
        assert operator.process.poll() is None  # reported, never crashed on
    finally:
        release([closed])
        admin_api.delete("AgentTool", gone)
        admin_api.delete("AgentTool", guarded)


def test_a_server_that_goes_away_later_is_found_by_the_next_listing(
    cluster: Cluster, admin_api: Achilles, operator: OperatorProcess, tmp_path: Path
) -> None:
    """No edit of the spec: the sweeper's listing pass finds the server gone."""
    server = mcp_servers.start_everything(tmp_path)
    name = f"fleeting-{uuid.uuid4().hex[:6]}"
    try:
        admin_api.apply(_tool(name, server.url, timeoutSeconds=3))
        ready = wait_for(lambda: _ready(admin_api, name), 60, what="the first listing")
        assert ready["status"] == "True"
        listed = admin_api.get("AgentTool", name)["status"]["schemaDigest"]
        server.stop()

        def gone() -> dict[str, Any] | None:
            found = _ready(admin_api, name)
            return found if found and found["status"] == "False" else None

        down = wait_for(gone, 6 * RELIST_SECONDS + 30, what="a later listing to find it gone")
        assert down["reason"] == "ServerUnreachable", operator.log()
        # The last good listing stays what agents are offered and the status shows.
        assert admin_api.get("AgentTool", name)["status"]["schemaDigest"] == listed
        assert admin_api.get("AgentTool", name)["metadata"]["generation"] == 1
        warned = wait_for(
            lambda: [e for e in _events(cluster, name) if e[1] == "McpServerUnreachable"],
            30,
            what="the Warning",
        )
        assert warned[0][0] == "Warning"
    finally:
        server.stop()
        admin_api.delete("AgentTool", name)


def test_a_server_started_after_its_agenttool_is_listed_by_the_retries(
    cluster: Cluster,
    achilles_release: Release,
    admin_api: Achilles,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    """The admin creates the AgentTool a moment before its server is up: the operator
    lists it again with its backoff (1 s doubling, 60 s at most), not at the next relist
    (an operator of its own here, with the default 300 s; this module's lists every 5 s)."""
    operator.stop()
    port = free_port("127.0.0.1")
    name = f"late-{uuid.uuid4().hex[:6]}"
    server: McpServer | None = None
    try:
        with running_operator(cluster, achilles_release, tmp_path / "operator.log") as late:
            admin_api.apply(_tool(name, f"http://127.0.0.1:{port}/mcp", timeoutSeconds=5))
            down = wait_for(lambda: _ready(admin_api, name), 60, what="the unreachable Ready")
            assert (down["status"], down["reason"]) == ("False", "ServerUnreachable"), late.log()
            assert f"127.0.0.1:{port}" in down["message"]
            server = mcp_servers.start_everything(tmp_path, port)

            def listed() -> dict[str, Any] | None:
                found = _ready(admin_api, name)
                return found if found and found["status"] == "True" else None

            # Down for the seconds the server took to start: a retry within about as
            # long (a minute at most), a third of the relist period at the latest.
            ready = wait_for(listed, MCP_RELIST_EVERY / 3, what="a retry to list it")
            assert ready["reason"] == "ToolsListed", late.log()
            status = admin_api.get("AgentTool", name)
            assert status["metadata"]["generation"] == 1  # no edit of the spec
            assert {"echo", "get-sum"} <= {tool["name"] for tool in status["status"]["mcpTools"]}
            listed_events = wait_for(
                lambda: [e for e in _events(cluster, name) if e[1] == "McpToolsListed"],
                30,
                what="the listing's Event",
            )
            assert listed_events[0][0] == "Normal"
            # Tried while down as often as the backoff allowed, warned exactly once per
            # error, not once per try nor once per path that listed it: the start-up
            # relist pass puts the source on the catalogue queue, keyed, so one listing
            # runs at a time and each reads the status the one before wrote.
            tries = late.log_path.read_text().count(f"AgentTool {name}: its MCP server did not")
            warned = [e[2] for e in _events(cluster, name) if e[1] == "McpServerUnreachable"]
            assert tries >= 1, late.log()
            assert warned, late.log()
            assert len(warned) == len(set(warned)), (warned, late.log())
            # The queue's retry listed it (the operator's start listed before the tool).
            assert "did not answer; listed again in" in late.log_path.read_text()
    finally:
        if server is not None:
            server.stop()
        else:
            release([port])
        admin_api.delete("AgentTool", name)
        operator.start()
