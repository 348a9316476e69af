"""Entry point of the kubelet stand-in: `python -m achilles_dev.kubelet` / `achilles dev kubelet`.

Wires the pieces: the Node (registered, heartbeat every `HEARTBEAT_S`), adoption of
runs a previous instance left, one pod informer per served namespace (or one for all),
and the reconcile loop. SIGTERM stops the stand-in but not the pods: like a kubelet
restart, the processes keep running and the next instance adopts them.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from kubernetes import client
from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from achilles.k8s.client import api_client as make_api_client
from achilles_dev.config import DEFAULT_NODE_NAME
from achilles_dev.kubelet.agent import StandIn
from achilles_dev.kubelet.api import PodApi
from achilles_dev.kubelet.logserver import serve_logs
from achilles_dev.kubelet.node import DEFAULT_MAX_PODS
from achilles_dev.kubelet.runs import prune_logs

log = logging.getLogger("achilles.kubelet")

HEARTBEAT_S = 20.0
_KEEP_FINISHED_POD_DIRS = 200


def parse_namespaces(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def _informers(
    api_client: client.ApiClient, standin: StandIn, namespaces: tuple[str, ...]
) -> list[SharedInformer]:
    core = client.CoreV1Api(api_client)
    # The client's informer carries no annotations; hence the ignores on its calls.
    informers: list[SharedInformer] = (
        [SharedInformer(core.list_namespaced_pod, namespace=ns) for ns in namespaces]  # type: ignore[no-untyped-call]
        if namespaces
        else [SharedInformer(core.list_pod_for_all_namespaces)]  # type: ignore[no-untyped-call]
    )

    def changed(obj: Any) -> None:
        standin.observe(standin.api.to_dict(obj))

    def deleted(obj: Any) -> None:
        standin.observe(standin.api.to_dict(obj), deleted=True)

    for informer in informers:
        informer.add_event_handler(ADDED, changed)  # type: ignore[no-untyped-call]
        informer.add_event_handler(MODIFIED, changed)  # type: ignore[no-untyped-call]
        informer.add_event_handler(DELETED, deleted)  # type: ignore[no-untyped-call]
    return informers


@dataclass(frozen=True)
class Options:
    kubeconfig: Path
    state_dir: Path
    node: str = DEFAULT_NODE_NAME
    namespaces: tuple[str, ...] = ()
    max_pods: int = DEFAULT_MAX_PODS
    # The HTTPS endpoint for `kubectl logs`; port 0 serves none.
    port: int = 0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None


def _heartbeat(api: PodApi, options: Options, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):  # an interval timer, not synchronisation
        try:
            api.heartbeat(options.node, options.max_pods, options.port)
        except Exception:  # a missed beat is retried at the next interval
            log.exception("node heartbeat failed")


def _serve_logs(options: Options, standin: StandIn) -> None:
    if not options.port:
        return
    if options.tls_cert is None or options.tls_key is None or options.client_ca is None:
        raise SystemExit(
            "--port needs --tls-cert-file, --tls-private-key-file and --client-ca-file"
        )
    serve_logs(
        options.port,
        standin.pods_dir,
        options.tls_cert,
        options.tls_key,
        options.client_ca,
        standin.container_running,
    )


def run(options: Options, stop: threading.Event) -> None:
    api = PodApi(make_api_client(options.kubeconfig))
    pods_dir = options.state_dir / "pods"
    pods_dir.mkdir(parents=True, exist_ok=True)
    prune_logs(pods_dir, keep=_KEEP_FINISHED_POD_DIRS)

    standin = StandIn(api, options.node, pods_dir, options.max_pods)
    _serve_logs(options, standin)
    api.register_node(options.node, options.max_pods, options.port)
    served = ", ".join(options.namespaces) or "all namespaces"
    log.info("node %s registered and Ready; serving %s", options.node, served)
    standin.adopt_recorded_runs()
    # Watches get their own connection pool so a long watch never starves status updates.
    informers = _informers(make_api_client(options.kubeconfig), standin, options.namespaces)
    for informer in informers:
        informer.start()  # type: ignore[no-untyped-call]
    threading.Thread(target=_heartbeat, args=(api, options, stop), daemon=True).start()
    try:
        standin.run(stop)
    finally:
        for informer in informers:
            informer.stop()  # type: ignore[no-untyped-call]
        log.info("stand-in stopped; pod processes keep running and will be adopted")


class _OneLineParser(argparse.ArgumentParser):
    """Bad options fail as every `achilles` command does: one `error:` line, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _OneLineParser(
        prog="achilles-kubelet",
        description="A kubelet stand-in that runs pods' commands as local processes.",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True, help="pod logs and records")
    parser.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    parser.add_argument(
        "--namespaces",
        default="",
        help="comma-separated namespaces whose pods to bind and run (default: all)",
    )
    parser.add_argument("--max-pods", type=int, default=DEFAULT_MAX_PODS)
    parser.add_argument("--port", type=int, default=0, help="HTTPS port for `kubectl logs`")
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument("--client-ca-file", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    options = Options(
        kubeconfig=args.kubeconfig,
        state_dir=args.state_dir,
        node=args.node_name,
        namespaces=parse_namespaces(args.namespaces),
        max_pods=args.max_pods,
        port=args.port,
        tls_cert=args.tls_cert_file,
        tls_key=args.tls_private_key_file,
        client_ca=args.client_ca_file,
    )
    run(options, stop)
