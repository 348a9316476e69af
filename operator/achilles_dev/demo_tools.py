"""The demo's tools (issue 38): two reference MCP servers from the registries, run by the
stack on the address pods reach the host at, and the AgentTools that name them.

`mcp-server-time` (PyPI) has read-only tools: the demo agent calls one without asking.
`@modelcontextprotocol/server-memory` (npm) has write tools: the demo agent asks its
owner before it writes, in the web inbox; the server's knowledge graph file
(`StackConfig.demo_memory_file`) is its own record of what was written. Both speak stdio
only, so supergateway serves each over streamable HTTP (`achilles_dev.mcp_servers`).
They are processes of the stack (pid files, logs, `dev status`, stopped by `dev down`),
started when the demo is installed.

Agents reach them as in-cluster Services: `mcp-time` and `mcp-memory` in the namespace
`achilles-tools`, Services without a selector whose EndpointSlice is the process's own
address (Kubernetes' way to front a backend that is not a pod), routed by the node's
kube-proxy. The local stack runs no cluster DNS (CoreDNS costs about 8 minutes to build
cold on this machine, against the test command's budget), so the AgentTools name each
Service by the cluster IP it is given (`SERVICE_HOST`), where a cluster with DNS names it
`http://mcp-time.achilles-tools.svc/mcp`.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from achilles_dev.config import StackConfig
from achilles_dev.pki import SERVICE_CLUSTER_IP_RANGE
from achilles_dev.stack_components import MCP_MEMORY, MCP_TIME

# The AgentTools' names: the model sees `time__get_current_time`, `memory__create_entities`.
TIME_TOOL = "time"
MEMORY_TOOL = "memory"
# A call's (and the operator's listing's) bound. supergateway starts the stdio server's
# process for each new session: 3-4 s on a quiet machine, ten times that on a loaded one.
TIMEOUT_SECONDS = 60
TOOLS_NAMESPACE = "achilles-tools"
SERVICE_PORT = 80
# The Services' cluster IPs: fixed near the top of the stack's service range, clear of
# those the API server hands out from its bottom (10.0.0.1 is its own).
SERVICE_HOST = {
    MCP_TIME: str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[240]),
    MCP_MEMORY: str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[241]),
}
MANAGED_BY = "achilles-dev"


@dataclass(frozen=True)
class DemoServer:
    component: str  # the stack's process name (pid file, log)
    tool: str  # the AgentTool naming it
    description: str
    port: int  # the process's, on the host's end of the node's veth
    process_url: str  # the process itself, as the host reaches it
    service_ip: str  # its Service's cluster IP

    @property
    def url(self) -> str:
        """Its Service's endpoint, as pods (runs, the operator) reach it."""
        return f"http://{self.service_ip}:{SERVICE_PORT}/mcp"

    @property
    def health_url(self) -> str:
        from achilles_dev.mcp_servers import HEALTH_PATH

        return self.process_url.removesuffix("/mcp") + HEALTH_PATH


def demo_servers(config: StackConfig) -> tuple[DemoServer, ...]:
    time_port, memory_port = config.ports.mcp_time, config.ports.mcp_memory
    return (
        DemoServer(
            MCP_TIME,
            TIME_TOOL,
            "The current time and time-zone conversion (mcp-server-time): read-only",
            time_port,
            config.mcp_url(time_port),
            SERVICE_HOST[MCP_TIME],
        ),
        DemoServer(
            MCP_MEMORY,
            MEMORY_TOOL,
            "A knowledge graph the agent may write to (server-memory): asks first",
            memory_port,
            config.mcp_url(memory_port),
            SERVICE_HOST[MCP_MEMORY],
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
            partial(mcp_servers.answers, server.process_url),
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


def service_manifests(config: StackConfig) -> list[dict[str, Any]]:
    """The namespace, and per server a Service without a selector and the EndpointSlice
    that names the process behind it (the node's kube-proxy routes its cluster IP there)."""
    labels = {"app.kubernetes.io/part-of": "achilles-demo"}
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TOOLS_NAMESPACE}}
    ]
    for server in demo_servers(config):
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": server.component,
                    "namespace": TOOLS_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "clusterIP": server.service_ip,
                    "ports": [{"name": "http", "port": SERVICE_PORT, "protocol": "TCP"}],
                },
            }
        )
        manifests.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{server.component}-process",
                    "namespace": TOOLS_NAMESPACE,
                    "labels": {
                        **labels,
                        "kubernetes.io/service-name": server.component,
                        "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                    },
                },
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": [config.apiserver_host], "conditions": {"ready": True}}
                ],
                "ports": [{"name": "http", "port": server.port, "protocol": "TCP"}],
            }
        )
    return manifests
