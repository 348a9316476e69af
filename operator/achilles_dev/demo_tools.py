"""The demo's tools (issue 38): two reference MCP servers from the registries, run by the
stack on the address pods reach the host at, and the AgentTools that name them.

`mcp-server-time` (PyPI) has read-only tools: the demo agent calls one without asking.
`@modelcontextprotocol/server-memory` (npm) has write tools: the demo agent asks its
owner before it writes, in the web inbox; the server's knowledge graph file
(`StackConfig.demo_memory_file`) is its own record of what was written. Both speak stdio
only, so supergateway serves each over streamable HTTP (`achilles_dev.mcp_servers`).
They are processes of the stack (pid files, logs, `dev status`, stopped by `dev down`),
started when the demo is installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from achilles_dev.config import StackConfig
from achilles_dev.stack_components import MCP_MEMORY, MCP_TIME

# The AgentTools' names: the model sees `time__get_current_time`, `memory__create_entities`.
TIME_TOOL = "time"
MEMORY_TOOL = "memory"
# A call's (and the operator's listing's) bound. supergateway starts the stdio server's
# process for each new session: 3-4 s on a quiet machine, ten times that on a loaded one.
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class DemoServer:
    component: str  # the stack's process name (pid file, log)
    tool: str  # the AgentTool naming it
    description: str
    port: int
    url: str  # as pods and the operator reach it

    @property
    def health_url(self) -> str:
        from achilles_dev.mcp_servers import HEALTH_PATH

        return self.url.removesuffix("/mcp") + HEALTH_PATH


def demo_servers(config: StackConfig) -> tuple[DemoServer, ...]:
    time_port, memory_port = config.ports.mcp_time, config.ports.mcp_memory
    return (
        DemoServer(
            MCP_TIME,
            TIME_TOOL,
            "The current time and time-zone conversion (mcp-server-time): read-only",
            time_port,
            config.mcp_url(time_port),
        ),
        DemoServer(
            MCP_MEMORY,
            MEMORY_TOOL,
            "A knowledge graph the agent may write to (server-memory): asks first",
            memory_port,
            config.mcp_url(memory_port),
        ),
    )


def start_demo_servers(config: StackConfig, report: Callable[[str], None]) -> None:
    """Start each (a running one is left alone) and wait until it answers a listing."""
    from achilles_dev import mcp_servers
    from achilles_dev.stack_components import start_component

    for server in demo_servers(config):
        env: dict[str, str] = {}
        if server.component == MCP_TIME:
            argv = mcp_servers.time_argv(server.port)
        else:
            config.demo_memory_file.parent.mkdir(parents=True, exist_ok=True)
            argv = mcp_servers.memory_argv(server.port)
            env = mcp_servers.memory_env(config.demo_memory_file)
        start_component(
            config,
            server.component,
            argv,
            partial(mcp_servers.answers, server.url),
            {**os.environ, **env},
            report=report,
        )


def tool_manifests(config: StackConfig) -> list[dict[str, Any]]:
    """The AgentTools naming the demo's servers (the default approval policy, `writes`:
    the time server's tools say they are read-only, server-memory's writes do not)."""
    return [
        {
            "apiVersion": "achilles.io/v1alpha1",
            "kind": "AgentTool",
            "metadata": {"name": server.tool},
            "spec": {
                "description": server.description,
                "implementation": "mcp",
                "mcp": {"url": server.url, "timeoutSeconds": TIMEOUT_SECONDS},
            },
        }
        for server in demo_servers(config)
    ]
