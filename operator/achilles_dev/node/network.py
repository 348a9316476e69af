"""The node's network: a network namespace joined to the host by a veth pair.

    host (root netns)                          node netns `achilles-<id>`
    achv<id>  10.213.N.1/24  <--- veth --->    eth0       10.213.N.2/24, default via .1
      API server, PostgreSQL listen here         kubelet, containerd, kube-proxy (iptables)
    route 10.214.N.0/24 via 10.213.N.2         achilles0  10.214.N.1/24: the CNI bridge, pods

Pods reach the API server through the `kubernetes` Service (kube-proxy DNATs it to
10.213.N.1) and PostgreSQL on 10.213.N.1; the host reaches pods by their IPs. kube-proxy's
rules, the bridge and the pods' veths all live inside the namespace, so deleting it
removes them, and two stacks (each with its own N) never touch each other's rules.
Nothing is added to the host's iptables.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from achilles.errors import LocalStackError
from achilles_dev.waiting import poll

LINK_NET = "10.213"  # 10.213.N.0/24: the veth between host and node
POD_NET = "10.214"  # 10.214.N.0/24: the node's pods
BRIDGE = "achilles0"
NODE_INTERFACE = "eth0"
_NETNS_DIR = Path("/run/netns")
# Where lock files belong (FHS); the file stays, empty, as lock files do.
_LOCK_FILE = Path("/run/lock/achilles-node-network.lock")


def stack_id(state_dir: Path) -> str:
    """A short stable name for a stack's host-wide resources (netns, veth, cgroups)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class NodeNetwork:
    stack_id: str
    index: int  # N in the addresses above, 1..254

    @property
    def netns(self) -> str:
        return f"achilles-{self.stack_id}"

    @property
    def netns_path(self) -> Path:
        return _NETNS_DIR / self.netns

    @property
    def host_veth(self) -> str:
        return f"achv{self.stack_id}"

    @property
    def host_ip(self) -> str:
        return f"{LINK_NET}.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"{LINK_NET}.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"{POD_NET}.{self.index}.0/24"

    @property
    def link_cidr(self) -> str:
        return f"{LINK_NET}.{self.index}.0/24"

    @property
    def cni_network(self) -> str:
        return f"achilles-{self.stack_id}"

    def enter(self, argv: list[str]) -> list[str]:
        """`argv` run inside the node's network namespace (and only that namespace)."""
        return ["nsenter", f"--net={self.netns_path}", "--", *argv]


def _ip(*args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    except OSError as error:
        raise LocalStackError(f"cannot run ip (iproute2): {error}") from error
    if check and done.returncode != 0:
        raise LocalStackError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def used_indices() -> set[int]:
    """N of every 10.213.N / 10.214.N network this host already has an address or route in."""
    text = _ip("-4", "-o", "addr", "show") + _ip("-4", "route", "show")
    pattern = rf"\b(?:{re.escape(LINK_NET)}|{re.escape(POD_NET)})\.(\d+)\."
    return {int(n) for n in re.findall(pattern, text)}


def choose_index() -> int:
    used = used_indices()
    for index in range(1, 255):
        if index not in used:
            return index
    raise LocalStackError(f"no free {LINK_NET}.N.0/24 left for another node network")


@contextmanager
def allocation_lock() -> Iterator[None]:
    """Held while a stack picks its N and claims it: two stacks starting at once on one
    host must not both see the same N free."""
    _LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def link_exists(name: str) -> bool:
    return bool(_ip("-o", "link", "show", "dev", name, check=False).strip())


def is_up(net: NodeNetwork) -> bool:
    return net.netns_path.exists() and link_exists(net.host_veth)


def _sysctl_in(net: NodeNetwork, name: str, value: str) -> None:
    path = "/proc/sys/" + name.replace(".", "/")
    subprocess.run(
        net.enter(["sh", "-c", f"echo {value} > {path}"]), check=True, capture_output=True
    )


def ensure_up(net: NodeNetwork) -> None:
    """Create the namespace, the veth pair, addresses and routes (idempotent)."""
    if link_exists(net.host_veth) and not net.netns_path.exists():
        _ip("link", "del", net.host_veth)  # half of a pair whose namespace is gone
    if not net.netns_path.exists():
        _ip("netns", "add", net.netns)
    if not link_exists(net.host_veth):
        _ip(
            "link",
            "add",
            net.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            NODE_INTERFACE,
            "netns",
            net.netns,
        )
    if f" {net.host_ip}/" not in _ip("-4", "-o", "addr", "show", "dev", net.host_veth):
        _ip("addr", "add", f"{net.host_ip}/24", "dev", net.host_veth)
    _ip("link", "set", net.host_veth, "up")
    inside = ("-n", net.netns)
    if f" {net.node_ip}/" not in _ip(*inside, "-4", "-o", "addr", "show", "dev", NODE_INTERFACE):
        _ip(*inside, "addr", "add", f"{net.node_ip}/24", "dev", NODE_INTERFACE)
    _ip(*inside, "link", "set", "lo", "up")
    _ip(*inside, "link", "set", NODE_INTERFACE, "up")
    _ip(*inside, "route", "replace", "default", "via", net.host_ip)
    _ip("route", "replace", net.pod_cidr, "via", net.node_ip, "dev", net.host_veth)
    # Forwarding between the pods' bridge and the veth, and iptables for bridged traffic
    # (a pod reaching a Service backed by a pod on the same bridge): namespace-local.
    _sysctl_in(net, "net.ipv4.ip_forward", "1")
    if Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        _sysctl_in(net, "net.bridge.bridge-nf-call-iptables", "1")


def teardown(net: NodeNetwork) -> None:
    """Delete the namespace (its bridge, veths and iptables rules go with it) and the veth."""
    if net.netns_path.exists():
        _ip("netns", "del", net.netns)
    # The kernel destroys the namespace's devices, and so the veth's host end, shortly after.
    if not poll(lambda: not link_exists(net.host_veth), timeout=5.0, interval=0.05):
        _ip("link", "del", net.host_veth, check=False)


def leftovers(net: NodeNetwork) -> list[str]:
    found = []
    if net.netns_path.exists():
        found.append(f"network namespace {net.netns}")
    if link_exists(net.host_veth):
        found.append(f"link {net.host_veth}")
    if net.pod_cidr.split("/")[0] in _ip("-4", "route", "show"):
        found.append(f"route to {net.pod_cidr}")
    return found
