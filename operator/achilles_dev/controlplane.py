"""Command lines, kubeconfigs and health probes of etcd, kube-apiserver, the controller-manager
and kube-scheduler.

The flags follow what kubeadm and envtest give these components, trimmed to one host:
everything listens on loopback (with a real node, the API server listens on the host's
end of the node's veth instead, which is also the `kubernetes` Service's endpoint), the
API server authorises with Node+RBAC and runs the default admission chain
(ResourceQuota and ValidatingAdmissionPolicy included), and the controller-manager runs
the controllers a cluster of Jobs and Services needs, each under its own service
account. kube-scheduler runs with a real node; a stack without a node runs none (its pods
are created and stay Pending, unbound).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from achilles_dev.config import LOOPBACK, StackConfig
from achilles_dev.pki import SERVICE_CLUSTER_IP_RANGE, KeyPair, Pki

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Admission plugins named explicitly on top of the defaults, so the two a platform of
# agents leans on are on regardless of upstream default changes.
ADMISSION_PLUGINS = ("NodeRestriction", "ResourceQuota", "ValidatingAdmissionPolicy")

CONTROLLERS = (
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "resourcequota-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "clusterrole-aggregation-controller",
    "validatingadmissionpolicy-status-controller",
)
# A real node registers tainted not-ready; this controller lifts the taint once it is
# Ready (and taints it again when its kubelet stops reporting). Without a node it has
# nothing to do.
REAL_NODE_CONTROLLERS = ("node-lifecycle-controller",)


def etcd_argv(bin_dir: Path, config: StackConfig) -> list[str]:
    client = f"http://{LOOPBACK}:{config.ports.etcd}"
    peer = f"http://{LOOPBACK}:{config.ports.etcd_peer}"
    argv = [
        str(bin_dir / "etcd"),
        "--name=achilles",
        f"--data-dir={config.etcd_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=achilles={peer}",
        "--initial-cluster-state=new",
        "--log-level=warn",
    ]
    if not config.durable:
        argv.append("--unsafe-no-fsync")
    return argv


def apiserver_argv(bin_dir: Path, config: StackConfig, pki: Pki) -> list[str]:
    if config.real_node:
        # Pods reach it through the `kubernetes` Service, whose endpoint this address is.
        endpoints = "--endpoint-reconciler-type=lease"
    else:
        # Loopback is not a valid Endpoints address; without a node no pod runs to
        # reach the `kubernetes` Service anyway.
        endpoints = "--endpoint-reconciler-type=none"
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://{LOOPBACK}:{config.ports.etcd}",
        f"--bind-address={config.apiserver_host}",
        f"--advertise-address={config.apiserver_host}",
        f"--secure-port={config.ports.apiserver}",
        f"--cert-dir={config.state_dir / 'apiserver-certs'}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        endpoints,
        # `kubectl logs` is proxied to the kubelet's HTTPS endpoint, verified by our CA.
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca.cert}",
        "--kubelet-preferred-address-types=InternalIP",
        "--allow-privileged=true",
        "--v=1",
    ]


def controller_manager_argv(bin_dir: Path, config: StackConfig, pki: Pki) -> list[str]:
    kubeconfig = config.component_kubeconfig("controller-manager")
    controllers = CONTROLLERS + (REAL_NODE_CONTROLLERS if config.real_node else ())
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={config.ports.controller_manager}",
        f"--tls-cert-file={pki.controller_manager_serving.cert}",
        f"--tls-private-key-file={pki.controller_manager_serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        "--use-service-account-credentials=true",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--v=1",
    ]


def scheduler_argv(bin_dir: Path, config: StackConfig, pki: Pki) -> list[str]:
    kubeconfig = config.component_kubeconfig("scheduler")
    return [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={config.ports.scheduler}",
        f"--tls-cert-file={pki.scheduler_serving.cert}",
        f"--tls-private-key-file={pki.scheduler_serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--leader-elect=false",
        "--v=1",
    ]


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> None:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "achilles-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [
            {"name": "achilles-local", "context": {"cluster": "achilles-local", "user": user}}
        ],
        "current-context": "achilles-local",
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)


def write_kubeconfigs(config: StackConfig, pki: Pki) -> None:
    server = config.apiserver_url
    write_kubeconfig(config.kubeconfig, server, pki.ca.cert, pki.admin, "admin")
    write_kubeconfig(
        config.component_kubeconfig("controller-manager"),
        server,
        pki.ca.cert,
        pki.controller_manager,
        "kube-controller-manager",
    )
    if not config.real_node:
        return  # no scheduler and no node
    for component, pair in (
        ("scheduler", pki.scheduler),
        ("kubelet", pki.node),
        ("kube-proxy", pki.kube_proxy),
    ):
        write_kubeconfig(
            config.component_kubeconfig(component), server, pki.ca.cert, pair, component
        )


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=context) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def etcd_is_healthy(config: StackConfig) -> bool:
    status, body = _get(f"http://{LOOPBACK}:{config.ports.etcd}/health")
    if status != 200:
        return False
    try:
        return bool(json.loads(body).get("health") == "true")
    except ValueError:
        return False


def _admin_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    return context


def apiserver_is_ready(config: StackConfig, pki: Pki) -> bool:
    status, body = _get(f"{config.apiserver_url}/readyz", _admin_context(pki))
    return status == 200 and body.strip() == b"ok"


def controller_manager_is_healthy(config: StackConfig, pki: Pki) -> bool:
    return _loopback_healthz(config.ports.controller_manager, pki)


def scheduler_is_healthy(config: StackConfig, pki: Pki) -> bool:
    return _loopback_healthz(config.ports.scheduler, pki)


def _loopback_healthz(port: int, pki: Pki) -> bool:
    url = f"https://{LOOPBACK}:{port}/healthz"
    status, body = _get(url, ssl.create_default_context(cafile=str(pki.ca.cert)))
    return status == 200 and body.strip() == b"ok"


def apiserver_version(config: StackConfig, pki: Pki) -> str:
    status, body = _get(f"{config.apiserver_url}/version", _admin_context(pki))
    if status != 200:
        return "unknown"
    return str(json.loads(body).get("gitVersion", "unknown"))
