"""The operator's own identity on the bench cluster, and what the API server and etcd
count of it.

The operator runs as a ServiceAccount of its own. FlowSchemas that match only that
account, one per verb, make the API server count the operator's requests by verb in its
own metrics (API Priority and Fairness), so nothing in the operator is changed to count
them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from kubernetes import client

from achilles_dev.chart import RELEASE_NAMESPACE
from bench.cluster import GROUP, VERSION, BenchCluster

OPERATOR_ACCOUNT = "achilles-bench-operator"
# One FlowSchema per verb class, matching only the operator's ServiceAccount.
COUNTED_VERBS: dict[str, list[str]] = {
    "watch": ["watch"],
    "list": ["list"],
    "get": ["get"],
    "create": ["create"],
    "patch": ["patch"],
    "update": ["update"],
    "delete": ["delete", "deletecollection"],
}
FLOW_SCHEMA_PREFIX = "bench-operator-"


def operator_kubeconfig(cluster: BenchCluster) -> Path:
    """A kubeconfig for the operator's own ServiceAccount (cluster-admin, like the
    tests' operator; the chart's narrower RBAC is not what is measured here). Made once:
    an operator restarted under the same cluster (`bench intake`) reuses it."""
    path = cluster.work_dir / "operator.kubeconfig"
    if path.exists():
        return path
    core = cluster.core
    core.create_namespaced_service_account(
        RELEASE_NAMESPACE,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT)),
    )
    client.RbacAuthorizationV1Api(cluster.api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="ServiceAccount", name=OPERATOR_ACCOUNT, namespace=RELEASE_NAMESPACE
                )
            ],
        )
    )
    issued = core.create_namespaced_service_account_token(
        OPERATOR_ACCOUNT,
        RELEASE_NAMESPACE,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=24 * 3600)
        ),
    )
    assert issued.status is not None
    token = issued.status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    cluster_entry = admin["clusters"][0]
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {"cluster": cluster_entry["name"], "user": OPERATOR_ACCOUNT},
            }
        ],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def count_operator_requests(cluster: BenchCluster) -> None:
    flow = client.FlowcontrolApiserverV1Api(cluster.api)
    for index, (name, verbs) in enumerate(COUNTED_VERBS.items()):
        flow.create_flow_schema(
            client.V1FlowSchema(
                metadata=client.V1ObjectMeta(name=f"{FLOW_SCHEMA_PREFIX}{name}"),
                spec=client.V1FlowSchemaSpec(
                    matching_precedence=100 + index,  # before every default schema
                    priority_level_configuration=client.V1PriorityLevelConfigurationReference(
                        name="workload-high"
                    ),
                    distinguisher_method=client.V1FlowDistinguisherMethod(type="ByUser"),
                    rules=[
                        client.V1PolicyRulesWithSubjects(
                            subjects=[
                                client.FlowcontrolV1Subject(
                                    kind="ServiceAccount",
                                    service_account=client.V1ServiceAccountSubject(
                                        name=OPERATOR_ACCOUNT, namespace=RELEASE_NAMESPACE
                                    ),
                                )
                            ],
                            resource_rules=[
                                client.V1ResourcePolicyRule(
                                    verbs=verbs,
                                    api_groups=["*"],
                                    resources=["*"],
                                    namespaces=["*"],
                                    cluster_scope=True,
                                )
                            ],
                        )
                    ],
                ),
            )
        )


def apiserver_metrics(cluster: BenchCluster) -> str:
    """The API server's /metrics, read with the admin's credentials."""
    method, url, headers, _, _ = cluster.api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = cluster.api.call_api(method, url, header_params=headers)
    return bytes(response.read()).decode()  # type: ignore[no-untyped-call]


_METRIC_LINE = re.compile(
    r'^apiserver_flowcontrol_dispatched_requests_total\{[^}]*flow_schema="'
    + FLOW_SCHEMA_PREFIX
    + r'([a-z]+)"[^}]*\} ([0-9.e+]+)$'
)


def operator_request_counts(cluster: BenchCluster) -> dict[str, int]:
    """Requests the API server has dispatched for the operator so far, by verb."""
    counts = dict.fromkeys(COUNTED_VERBS, 0)
    for line in apiserver_metrics(cluster).splitlines():
        match = _METRIC_LINE.match(line)
        if match:
            counts[match.group(1)] += int(float(match.group(2)))
    return counts


def request_rates(
    before: dict[str, int], after: dict[str, int], seconds: float
) -> dict[str, float]:
    return {verb: round((after[verb] - before[verb]) / seconds, 3) for verb in before}


def etcd_sizes(cluster: BenchCluster) -> dict[str, int]:
    """etcd's database size, total and in use (bytes), from its own /metrics."""
    import urllib.request

    url = f"http://127.0.0.1:{cluster.stack.config.ports.etcd}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        metrics = response.read().decode()
    sizes = {}
    for name in ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"):
        match = re.search(rf"^{name} ([0-9.e+]+)$", metrics, re.MULTILINE)
        sizes[name.removeprefix("etcd_mvcc_")] = int(float(match.group(1))) if match else 0
    return sizes


def mean_object_bytes(cluster: BenchCluster, plural: str, sample: int = 100) -> float:
    """The mean JSON size of up to `sample` objects of a namespaced custom resource."""
    listing = cluster.custom.list_cluster_custom_object(GROUP, VERSION, plural, limit=sample)
    items = listing.get("items", []) if isinstance(listing, dict) else []
    if not items:
        return 0.0
    return sum(len(json.dumps(item, separators=(",", ":"))) for item in items) / len(items)
