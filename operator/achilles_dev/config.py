"""Where one local stack keeps its state, which ports it listens on, and what its node is.

A stack is fully described by a state directory, a set of ports and its node's network
index, so two can run side by side: the developer's `achilles dev up` and the test
suite's own stack. Its node is the real one (containerd, kubelet, kube-proxy in a
network namespace of its own: `achilles_dev.node`), or none: a control plane alone, where
pods are created and never scheduled (the benchmarks of Job creation, and the tests of
the stack's own processes, which need no root).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from typing import Literal

from achilles.errors import LocalStackError
from achilles_dev.node.configs import NodeLayout
from achilles_dev.node.network import NodeNetwork, stack_id
from achilles_dev.ports import free_ports, lease_all
from achilles_dev.postgres import default_data_root

LOOPBACK = "127.0.0.1"
DATABASE_NAME = "achilles"
DEFAULT_NODE_NAME = "achilles-local"
# The API Service's node port on a real node: the host's curl and browser reach the API at
# http://<node IP>:API_NODE_PORT (each stack's node has an IP of its own, so two never clash).
API_NODE_PORT = 30080
_SETTINGS = "stack.json"

NodeKind = Literal["containerd", "none"]
NODE_KINDS: tuple[NodeKind, ...] = ("containerd", "none")


# The developer stack's ports are fixed (its URLs stay the same from one `make dev` to the
# next) and, like every port a stack listens on, outside the kernel's ephemeral range, so
# a component restarted on its port always gets it back; they are also below the pool the
# throw-away stacks choose from (achilles_dev.ports), so the two never meet.
@dataclass(frozen=True)
class Ports:
    postgres: int = 15432
    etcd: int = 12379
    etcd_peer: int = 12380
    apiserver: int = 16443
    controller_manager: int = 16444
    scheduler: int = 16445
    # The offline model server the demo's AgentModel points at (host side, pods reach it).
    model_server: int = 18400
    # The dev OpenID Provider (achilles_dev.oidc): people's sign-in and `achilles dev token`.
    oidc_provider: int = 18410
    # The demo's reference MCP servers (achilles_dev.demo_tools): read-only tools, writes.
    mcp_time: int = 18420
    mcp_memory: int = 18421

    @classmethod
    def free(cls) -> Ports:
        """Ports free now, outside the kernel's ephemeral range and leased to this process
        (for a second, throw-away stack): see achilles_dev.ports."""
        return cls(*free_ports(len(dataclasses.fields(cls))))

    def lease(self) -> None:
        """Hold these ports for this process (a stack read back from its state)."""
        lease_all(astuple(self))


def default_state_dir() -> Path:
    override = os.environ.get("ACHILLES_DEV_STATE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "achilles" / "dev"


@dataclass(frozen=True)
class StackConfig:
    state_dir: Path
    ports: Ports = field(default_factory=Ports)
    # Where the stack's PostgreSQL keeps its data; it must be reachable by the server's user.
    postgres_dir: Path = field(default_factory=lambda: default_data_root() / "dev")
    # False for throw-away stacks: no fsync in etcd and PostgreSQL.
    durable: bool = True
    node_name: str = DEFAULT_NODE_NAME
    # The cluster tests' stacks leave PostgreSQL to the database fixtures.
    with_postgres: bool = True
    # "containerd": the real node; "none": no node (pods are created, never scheduled).
    node: NodeKind = "containerd"
    # N of the real node's 10.213.N.0/24 and 10.214.N.0/24 networks; 0 until the first up.
    network_index: int = 0

    def save(self) -> None:
        """Record this stack's settings, so later commands on its state dir describe it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        document = {
            "ports": asdict(self.ports),
            "postgres_dir": str(self.postgres_dir),
            "durable": self.durable,
            "node_name": self.node_name,
            "with_postgres": self.with_postgres,
            "node": self.node,
            "network_index": self.network_index,
        }
        (self.state_dir / _SETTINGS).write_text(json.dumps(document, indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> StackConfig:
        """The settings `up` recorded in `state_dir`, or the defaults for a new stack."""
        try:
            document = json.loads((state_dir / _SETTINGS).read_text())
        except FileNotFoundError:
            return cls(state_dir=state_dir)
        except (OSError, ValueError) as error:
            raise LocalStackError(f"cannot read {state_dir / _SETTINGS}: {error}") from error
        # Stacks recorded before the real node existed, or with `--node process`, ran their
        # pods as host processes, a node that is gone (issue 39): nothing here stops them.
        node = document.get("node", "process")
        if node == "process":
            raise LocalStackError(
                f"the stack in {state_dir} ran its pods as host processes (`--node process`, "
                "removed): stop it with an older checkout's `achilles dev down`, or end its "
                f"processes, then remove {state_dir}"
            )
        ports = {f.name for f in dataclasses.fields(Ports)}
        return cls(
            state_dir=state_dir,
            # Without the ports of components that are gone (the process node's).
            ports=Ports(**{k: v for k, v in document["ports"].items() if k in ports}),
            postgres_dir=Path(document["postgres_dir"]),
            durable=bool(document["durable"]),
            node_name=str(document["node_name"]),
            with_postgres=bool(document["with_postgres"]),
            node=parse_node_kind(node),
            network_index=int(document.get("network_index", 0)),
        )

    @property
    def real_node(self) -> bool:
        return self.node == "containerd"

    @property
    def network(self) -> NodeNetwork:
        """The real node's network (`network_index` is chosen by the first `up`)."""
        if not self.network_index:
            raise LocalStackError(f"the stack in {self.state_dir} has no node network yet")
        return NodeNetwork(stack_id=stack_id(self.state_dir), index=self.network_index)

    @property
    def node_layout(self) -> NodeLayout:
        return NodeLayout(self.state_dir / "node")

    @property
    def model_server_url(self) -> str:
        """The demo model server's base URL, as pods (and the host) reach it."""
        return f"http://{self.apiserver_host}:{self.ports.model_server}/v1"

    def mcp_url(self, port: int) -> str:
        """A demo MCP server's streamable-HTTP endpoint, as pods (and the host) reach it."""
        return f"http://{self.apiserver_host}:{port}/mcp"

    @property
    def demo_memory_file(self) -> Path:
        """The demo's server-memory keeps its knowledge graph here: the server's own record
        of the writes approved in the inbox."""
        return self.state_dir / "mcp-memory" / "memory.jsonl"

    @property
    def oidc_issuer(self) -> str:
        """The dev OpenID Provider's issuer: where the host's browser and curl, and pods,
        reach it (the address pods reach the model server at)."""
        return f"http://{self.apiserver_host}:{self.ports.oidc_provider}"

    @property
    def api_url(self) -> str:
        """The API (`achilles api`, the chart's Deployment) as the host reaches it: its
        Service's node port on the real node's IP, through the node's kube-proxy."""
        return f"http://{self.network.node_ip}:{API_NODE_PORT}"

    @property
    def apiserver_host(self) -> str:
        """Loopback, or for a real node the host's end of its veth (pods must reach it)."""
        return self.network.host_ip if self.real_node else LOOPBACK

    @property
    def pod_database_url(self) -> str:
        """The superuser's URL at the address pods reach the host at (no password: pods
        log in with one, so their Secrets hold `achilles_dev.logins`' URLs instead)."""
        return self.database_url.replace(f"@{LOOPBACK}:", f"@{self.apiserver_host}:", 1)

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def etcd_dir(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig handed to people and tests."""
        return self.state_dir / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.state_dir / f"{component}.kubeconfig"

    def pidfile(self, component: str) -> Path:
        return self.run_dir / f"{component}.pid"

    def log(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.apiserver_host}:{self.ports.apiserver}"

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg://postgres@{LOOPBACK}:{self.ports.postgres}/{DATABASE_NAME}"


def parse_node_kind(value: object) -> NodeKind:
    for kind in NODE_KINDS:
        if value == kind:
            return kind
    raise LocalStackError(f"unknown node kind {value!r} (one of {', '.join(NODE_KINDS)})")
