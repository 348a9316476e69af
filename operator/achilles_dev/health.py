"""Is the local stack healthy? What `achilles dev status` shows, one check per part.

Every process the stack started (PostgreSQL, the control plane, the node, the demo model
server, the dev OpenID Provider, the demo's MCP servers), then what the chart installed:
the Helm release (deployed, and every object it owns still there: a deleted
`AgentPlatform/default` is a broken release, not a running one), the operator and the API
(the chart's Deployments, every replica ready). A part that is not healthy says what to
do; `dev status` exits non-zero when any is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from achilles_dev import controlplane, postgres
from achilles_dev.chart import RELEASE, RELEASE_NAMESPACE, ReleaseStatus, release_status
from achilles_dev.oidc import is_serving
from achilles_dev.pki import Pki
from achilles_dev.processes import running_from_pidfile
from achilles_dev.stack import LocalStack
from achilles_dev.stack_components import MODEL_SERVER, OIDC_PROVIDER, is_http_ok
from achilles_dev.versions import bin_dir

UP_HINT = "run `achilles dev up`"


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    detail: str
    healthy: bool


def stack_checks(stack: LocalStack) -> list[Check]:
    """The stack's parts, in start order, then the release and the operator."""
    config = stack.config
    checks = []
    if stack.with_postgres:
        running = postgres.is_running(config.postgres_dir)
        checks.append(
            Check(
                "postgres",
                "running" if running else "stopped",
                f"port {config.ports.postgres}" if running else UP_HINT,
                running,
            )
        )
    for component in stack.components():
        checks.append(_component_check(stack, component.name, component.process))
    checks += _demo_server_checks(stack)
    if not controlplane.apiserver_is_ready(config, Pki(config.pki_dir)):
        checks.append(Check("release", "unknown", "the API server does not answer", False))
        return checks
    checks += release_checks(config.kubeconfig, bin_dir())
    return checks


def process_check(stack: LocalStack, name: str) -> Check:
    """One process of the stack, as `dev status` shows it."""
    return _component_check(stack, name, running_from_pidfile(stack.config.pidfile(name)))


def _demo_server_checks(stack: LocalStack) -> list[Check]:
    """The demo's MCP servers, once the demo started them (their pid files are there)."""
    from achilles_dev.demo_tools import demo_servers

    checks = []
    for server in demo_servers(stack.config):
        pidfile = stack.config.pidfile(server.component)
        if not pidfile.exists():
            continue
        process = running_from_pidfile(pidfile)
        if process is None:
            checks.append(Check(server.component, "stopped", UP_HINT, False))
        elif not is_http_ok(server.health_url):
            checks.append(
                Check(server.component, "not answering", f"pid {process.pid}, {server.url}", False)
            )
        else:
            checks.append(
                Check(server.component, "running", f"pid {process.pid}, {server.url}", True)
            )
    return checks


def _component_check(stack: LocalStack, name: str, process: Any) -> Check:
    if process is None:
        return Check(name, "stopped", UP_HINT, False)
    if name == MODEL_SERVER:
        url = stack.config.model_server_url
        if not is_http_ok(f"{url}/models"):
            return Check(name, "not answering", f"pid {process.pid}, {url}", False)
        return Check(name, "running", f"pid {process.pid}, {url}", True)
    if name == OIDC_PROVIDER:
        issuer = stack.config.oidc_issuer
        if not is_serving(issuer):
            return Check(name, "not answering", f"pid {process.pid}, issuer {issuer}", False)
        return Check(name, "running", f"pid {process.pid}, issuer {issuer}", True)
    return Check(name, "running", f"pid {process.pid}", True)


def release_checks(
    kubeconfig: Path,
    helm_bin_dir: Path,
    *,
    release: str = RELEASE,
    namespace: str = RELEASE_NAMESPACE,
    helm_env: dict[str, str] | None = None,
) -> list[Check]:
    """The chart's release (deployed, nothing it owns missing) and its operator."""
    status = release_status(kubeconfig, helm_bin_dir, release, namespace, helm_env=helm_env)
    if status is None:
        return [
            Check("release", "not installed", f"{namespace}/{release}: {UP_HINT}", False),
            Check("operator", "not installed", "comes with the release", False),
            Check("api", "not installed", "comes with the release", False),
        ]
    manifest = [doc for doc in yaml.safe_load_all(status.manifest) if doc]
    return [
        _release_check(kubeconfig, status, manifest),
        _operator_check(kubeconfig, manifest),
        _api_check(kubeconfig, manifest),
    ]


def _release_check(
    kubeconfig: Path, status: ReleaseStatus, manifest: list[dict[str, Any]]
) -> Check:
    where = f"{status.namespace}/{status.name} revision {status.revision}"
    if status.state != "deployed":
        return Check("release", status.state, f"{where}: {status.description}; {UP_HINT}", False)
    missing = missing_objects(kubeconfig, manifest, status.namespace)
    if missing:
        return Check(
            "release", "incomplete", f"{where}: missing {', '.join(missing)}; {UP_HINT}", False
        )
    return Check("release", "deployed", where, True)


def missing_objects(kubeconfig: Path, manifest: list[dict[str, Any]], namespace: str) -> list[str]:
    """`Kind/name` of every object of the release's manifest the API server lacks."""
    from kubernetes import dynamic
    from kubernetes.client.exceptions import ApiException

    from achilles.k8s.client import api_client

    missing = []
    with api_client(kubeconfig) as api:
        client = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
        for document in manifest:
            meta = document.get("metadata", {})
            resource = client.resources.get(
                api_version=document["apiVersion"], kind=document["kind"]
            )
            try:
                if resource.namespaced:
                    resource.get(name=meta["name"], namespace=meta.get("namespace", namespace))
                else:
                    resource.get(name=meta["name"])
            except ApiException as error:
                if error.status != 404:
                    raise
                missing.append(f"{document['kind']}/{meta['name']}")
    return missing


def _operator_check(kubeconfig: Path, manifest: list[dict[str, Any]]) -> Check:
    return _deployment_check(
        kubeconfig,
        manifest,
        "operator",
        "the chart's Deployment is off here (operator.enabled=false):"
        " run `achilles operator` beside the stack",
    )


def _api_check(kubeconfig: Path, manifest: list[dict[str, Any]]) -> Check:
    """The API's Deployment, ready, and where the host reaches it (its NodePort)."""
    check = _deployment_check(
        kubeconfig,
        manifest,
        "api",
        "the chart's API is off here (api.enabled=false: the stack has no real node"
        " or no PostgreSQL)",
    )
    services = _component_documents(manifest, "Service", "api")
    node_port = next(
        (p.get("nodePort") for s in services for p in s["spec"]["ports"] if p.get("nodePort")),
        None,
    )
    if check.healthy and check.state == "ready" and node_port is not None:
        return replace(check, detail=f"{check.detail}, node port {node_port}")
    return check


def _component_documents(
    manifest: list[dict[str, Any]], kind: str, component: str
) -> list[dict[str, Any]]:
    return [
        doc
        for doc in manifest
        if doc.get("kind") == kind
        and doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]


def _deployment_check(
    kubeconfig: Path, manifest: list[dict[str, Any]], component: str, off: str
) -> Check:
    deployments = _component_documents(manifest, "Deployment", component)
    if not deployments:
        return Check(component, "not deployed", off, True)
    meta = deployments[0]["metadata"]
    namespace, name = meta.get("namespace", RELEASE_NAMESPACE), meta["name"]
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from achilles.k8s.client import api_client

    with api_client(kubeconfig) as api:
        try:
            deployment = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            return Check(component, "missing", f"Deployment {namespace}/{name}; {UP_HINT}", False)
    wanted = max(deployment.spec.replicas or 1, 1)
    ready = (deployment.status.ready_replicas if deployment.status else None) or 0
    where = f"Deployment {namespace}/{name}, {ready}/{wanted} ready"
    if ready < wanted:
        return Check(
            component, "not ready", f"{where}: kubectl -n {namespace} describe pods", False
        )
    return Check(component, "ready", where, True)
