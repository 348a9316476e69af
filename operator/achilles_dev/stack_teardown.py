"""`achilles dev down`: stop exactly the stack's processes, then remove what its node left
and check that nothing is left. A real node is stopped first (kubelet, pods, kube-proxy,
containerd), then the control plane; a stack without a node has only the control plane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from achilles.errors import LocalStackError
from achilles_dev import postgres
from achilles_dev.processes import running_from_pidfile, stop_group
from achilles_dev.stack_components import DEMO_MCP_SERVERS, MODEL_SERVER, OIDC_PROVIDER

if TYPE_CHECKING:
    from achilles_dev.stack import LocalStack


def stop_control_plane(stack: LocalStack) -> None:
    """A stack without a node: stop the components in reverse start order."""
    stopped = []
    for component in reversed(stack.components()):
        if component.process is not None:
            stop_group(component.process, what=component.name)
            stopped.append(component.name)
        stack.config.pidfile(component.name).unlink(missing_ok=True)
    if stack.with_postgres and postgres.stop(stack.config.postgres_dir):
        stopped.append("postgres")
    leftovers = [c.name for c in stack.components() if c.running]
    if stack.with_postgres and postgres.is_running(stack.config.postgres_dir):
        leftovers.append("postgres")
    if leftovers:
        raise LocalStackError(f"still running after down: {', '.join(leftovers)}")
    stack.report(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


def stop_real_node(stack: LocalStack) -> None:
    """Stop the node first (kubelet, pods, kube-proxy, containerd), then the control plane."""
    stopped = []
    has_node = bool(stack.config.network_index)
    node = stack.node() if has_node else None

    def stop(name: str) -> None:
        process = running_from_pidfile(stack.config.pidfile(name))
        if process is not None:
            stop_group(process, what=name)
            stopped.append(name)
        stack.config.pidfile(name).unlink(missing_ok=True)

    stop("kubelet")  # first, so that it recreates nothing
    if node is not None and node.containerd_is_ready():
        pods = node.remove_pods()
        if pods:
            stopped.append(f"{pods} pod sandbox(es)")
    for name in (
        *DEMO_MCP_SERVERS,  # the demo's, when it started them (reached on the same address)
        MODEL_SERVER,  # listens on the node network's host address: before the network
        OIDC_PROVIDER,  # the same
        "kube-proxy",
        "containerd",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
    ):
        stop(name)
    if node is not None:
        node.clean_host()
    if stack.with_postgres and postgres.stop(stack.config.postgres_dir):
        stopped.append("postgres")
    leftovers = [c.name for c in stack.components() if c.running]
    leftovers += [n for n in DEMO_MCP_SERVERS if running_from_pidfile(stack.config.pidfile(n))]
    leftovers += node.leftovers() if node is not None else []
    if stack.with_postgres and postgres.is_running(stack.config.postgres_dir):
        leftovers.append("postgres")
    if leftovers:
        raise LocalStackError(f"still there after down: {', '.join(leftovers)}")
    stack.report(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
