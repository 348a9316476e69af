"""The Helm chart: lints, renders what the values say, installs and upgrades on a real API server.

Rendering tests need only the helm binary; install and upgrade use the session's
release (conftest: a real `helm install`, the migration hook Job run by the session's
real node against a fresh database).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from achilles.db import migrate
from achilles.db.database import Database
from achilles.k8s.client import to_dict
from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.cluster.kube import present
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[3]
HELM = str(bin_dir() / "helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check)


def render(*settings: str, include_crds: bool = False) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE]
    for setting in settings:
        args += ["--set", setting]
    if include_crds:
        args.append("--include-crds")
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def by_kind(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        kinds.setdefault(document["kind"], []).append(document)
    return kinds


def one(documents: list[dict[str, Any]], kind: str, name_part: str = "") -> dict[str, Any]:
    found = [d for d in by_kind(documents).get(kind, []) if name_part in d["metadata"]["name"]]
    assert len(found) == 1, f"{kind} *{name_part}*: {[d['metadata']['name'] for d in found]}"
    return found[0]


# --- lint and render (helm only) ---


def test_helm_lint_is_clean() -> None:
    result = helm("lint", "--strict", str(CHART_DIR))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_default_render_has_every_component() -> None:
    kinds = {kind: len(docs) for kind, docs in by_kind(render()).items()}
    assert kinds == {
        "Namespace": 1,
        "ResourceQuota": 1,
        "LimitRange": 1,
        "ServiceAccount": 2,  # operator, API
        "ClusterRole": 4,  # operator, API, portal, admin
        "ClusterRoleBinding": 3,  # operator, API, admin groups
        "Role": 1,
        "RoleBinding": 1,
        "Service": 2,  # operator metrics, API
        "Deployment": 2,  # operator, API
        "PodDisruptionBudget": 1,  # the API's two replicas
        "AgentPlatform": 1,
        "ValidatingAdmissionPolicy": 3,  # adminPaused, single default model, platform owner
        "ValidatingAdmissionPolicyBinding": 3,
        "Job": 1,  # the migration hook
    }


def test_platform_handed_over_leaves_out_the_object_and_its_guard() -> None:
    """platform.create=false: kubectl owns AgentPlatform/default (the object stays: keep)."""
    kinds = by_kind(render("platform.create=false"))
    assert "AgentPlatform" not in kinds
    assert all(
        "platform-owner" not in p["metadata"]["name"] for p in kinds["ValidatingAdmissionPolicy"]
    )
    owned = one(render(), "AgentPlatform")
    assert owned["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_operator_disabled_leaves_out_its_workload_and_identity() -> None:
    kinds = by_kind(render("operator.enabled=false", "api.enabled=false"))
    for kind in ("Deployment", "ServiceAccount", "Role", "RoleBinding", "Service"):
        assert kind not in kinds
    assert [role["metadata"]["name"] for role in kinds["ClusterRole"]] == [
        "achilles-portal",
        "achilles-admin",
    ]
    # The API is its own component: on without the operator (test_api_chart.py).
    without_operator = render("operator.enabled=false")
    assert [d for d in without_operator if "operator" in d["metadata"]["name"]] == []
    assert one(without_operator, "Deployment")["metadata"]["name"] == "achilles-api"


def test_operator_deployment_is_restricted_and_probed() -> None:
    deployment = one(render(), "Deployment", "operator")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["command"] == ["achilles"]
    assert container["args"][0] == "operator"
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    env = {item["name"]: item for item in container["env"]}
    assert env["ACHILLES_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "achilles-database",
        "key": "url",
    }
    assert env["ACHILLES_RUNS_NAMESPACE"]["value"] == "achilles-runs"
    service = one(render(), "Service", "operator-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_tracing_is_off_unless_an_otlp_endpoint_is_set() -> None:
    """The operator exports spans, and gives its runs the same settings, only with
    `tracing.otlpEndpoint` (docs/observability.md, "Traces")."""

    def env(*settings: str) -> dict[str, Any]:
        (container,) = one(render(*settings), "Deployment", "operator")["spec"]["template"]["spec"][
            "containers"
        ]
        return {item["name"]: item.get("value") for item in container["env"]}

    assert not [name for name in env() if name.startswith("OTEL_")]
    traced = env("tracing.otlpEndpoint=http://otel-collector.observability:4318")
    assert traced["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"


def test_operator_rbac_is_exactly_what_it_does() -> None:
    documents = render("operator.rbac.secretNames={llm-key}")
    cluster_rules = one(documents, "ClusterRole", "operator")["rules"]
    assert [(r["apiGroups"], r["resources"], r["verbs"]) for r in cluster_rules] == [
        (["achilles.io"], ["agents", "agentmodels", "agenttools", "agentplatforms"],
         ["get", "list", "watch", "patch"]),
        (["achilles.io"], ["agents/status", "agentmodels/status", "agenttools/status",
                           "agentplatforms/status"], ["get", "patch"]),
        ([""], ["events"], ["create"]),
    ]  # fmt: skip
    runs = one(documents, "Role", "operator")
    assert runs["metadata"]["namespace"] == "achilles-runs"
    assert runs["rules"] == [
        {"apiGroups": ["batch"], "resources": ["jobs"],
         "verbs": ["create", "delete", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": ["achilles-runner-database", "llm-key"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]  # fmt: skip


def test_max_concurrency_feeds_quota_and_platform() -> None:
    documents = render("maxConcurrency=7", "platform.timezone=Europe/Berlin")
    assert one(documents, "ResourceQuota")["spec"]["hard"] == {"pods": "7"}
    platform = one(documents, "AgentPlatform")
    assert platform["metadata"]["name"] == "default"
    assert platform["spec"] == {
        "timezone": "Europe/Berlin",
        "weeklyTokenBudget": 200000,
        "maxIterations": 8,
        "maxConcurrency": 7,
        "runTimeoutSeconds": 900,
        "platformPrompt": "",
    }


def test_admin_groups_feed_the_policy_and_the_admin_binding() -> None:
    documents = render("adminGroups={platform-admins,sre}")
    policy = one(documents, "ValidatingAdmissionPolicy", "admin-paused")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["adminGroups"] == '["platform-admins","sre"]'
    # Setting or changing the lock, and deleting an Agent under it (issue 36 item 1).
    assert [v["message"] for v in policy["spec"]["validations"]] == [
        "only members of platform-admins, sre may set or change spec.adminPaused",
        "an admin paused this Agent (spec.adminPaused: true): only members of"
        " platform-admins, sre may delete it; ask one to lift the pause first",
    ]
    binding = one(documents, "ClusterRoleBinding", "admin")
    assert [s["name"] for s in binding["subjects"]] == ["platform-admins", "sre"]


def test_portal_subjects_get_the_portal_role() -> None:
    documents = render(
        "rbac.portalSubjects[0].kind=ServiceAccount",
        "rbac.portalSubjects[0].name=portal",
        "rbac.portalSubjects[0].namespace=portal",
    )
    binding = one(documents, "ClusterRoleBinding", "portal")
    assert binding["roleRef"]["name"] == "achilles-portal"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "portal"}
    ]


def test_migration_job_is_a_pre_install_and_pre_upgrade_hook() -> None:
    job = one(render(), "Job", "migrate")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["command"] == ["achilles", "db", "upgrade"]
    # The schema owner's login, in a Secret of its own: no other component's login may
    # run DDL, and no other pod reads this Secret.
    env = {item["name"]: item for item in container["env"]}
    assert env["ACHILLES_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "achilles-migrations-database",
        "key": "url",
    }
    assert "Job" not in by_kind(render("migrations.enabled=false"))


@pytest.mark.parametrize("component", ["migrations", "api", "operator", "runner"])
def test_each_component_needs_a_database_secret_of_its_own(component: str) -> None:
    """An empty Secret name is refused: none falls back to another component's login."""
    result = helm(
        "template", RELEASE, str(CHART_DIR), "--set", f"database.{component}.secretName=",
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"at '/database/{component}/secretName'" in result.stderr


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("maxConcurrency=0", "at '/maxConcurrency': minimum: got 0, want 1"),
        ("operator.replica=2", "additional properties 'replica' not allowed"),
        ("platform.timezone=Europe Berlin", "at '/platform/timezone'"),
        # Well-formed but unknown: the chart checks the engine's list before installing.
        (
            "platform.timezone=Europe/Berln",
            'platform.timezone: unknown time zone "Europe/Berln" (expected an IANA name',
        ),
        ("runsNamespace.name=Runs_NS", "at '/runsNamespace/name'"),
        ("adminGroups=null", "missing property 'adminGroups'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("tracing.otlpEndpoint=collector:4318", "at '/tracing/otlpEndpoint'"),
    ],
)
def test_values_schema_refuses_bad_values(setting: str, complaint: str) -> None:
    result = helm("template", RELEASE, str(CHART_DIR), "--set", setting, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_chart_crds_are_the_generated_crds() -> None:
    rendered = {
        doc["metadata"]["name"]: doc
        for doc in render(include_crds=True)
        if doc["kind"] == "CustomResourceDefinition"
    }
    generated = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        generated[crd["metadata"]["name"]] = crd
    assert rendered == generated


# --- install and upgrade on the real API server ---


def release_values(release: Release) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(
        release.helm("get", "values", RELEASE, "--all", "-o", "yaml", "-n", RELEASE_NAMESPACE)
    )
    return values


def test_install_created_what_the_chart_promises(
    cluster: Cluster, achilles_release: Release, admin_api: Achilles
) -> None:
    history = yaml.safe_load(release_history(achilles_release))
    assert history[0]["description"] == "Install complete"

    # The CRDs on the server are the generated ones, established.
    extensions = client.ApiextensionsV1Api(cluster.api)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        served = extensions.read_custom_resource_definition(crd["metadata"]["name"])
        validation = present(served.spec.versions[0].var_schema, "the served version's schema")
        served_schema = to_dict(cluster.api, validation.open_apiv3_schema)
        assert served_schema == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        conditions = present(served.status, "the CRD's status").conditions or []
        assert any(c.type == "Established" and c.status == "True" for c in conditions)

    core = client.CoreV1Api(cluster.api)
    quota = core.read_namespaced_resource_quota("achilles-runs", "achilles-runs")
    assert present(quota.spec, "the quota's spec").hard == {"pods": "4"}
    limits = core.read_namespaced_limit_range("achilles-runs", "achilles-runs")
    limit = present(limits.spec, "the limit range's spec").limits[0]
    assert limit.default_request == {"cpu": "100m", "memory": "256Mi"}

    platform = admin_api.get("AgentPlatform", "default")
    assert platform["spec"]["maxConcurrency"] == 4
    assert platform["spec"]["timezone"] == "UTC"

    admission = client.AdmissionregistrationV1Api(cluster.api)
    policies = {
        present(p.metadata, "a policy's metadata").name
        for p in admission.list_validating_admission_policy().items
    }
    assert {
        "achilles-admin-paused",
        "achilles-single-default-model",
        "achilles-platform-owner",
    } <= policies


def test_install_ran_the_migration_hook(cluster: Cluster, achilles_release: Release) -> None:
    engine = Database(achilles_release.database_url).engine
    try:
        assert migrate.current_revisions(engine) == migrate.head_revisions()
    finally:
        engine.dispose()
    # hook-succeeded: the Job is gone once it completed.
    jobs = client.BatchV1Api(cluster.api).list_namespaced_job(RELEASE_NAMESPACE).items
    assert [present(job.metadata, "a Job's metadata").name for job in jobs] == []


def test_operator_objects_are_accepted_by_the_api_server(
    cluster: Cluster, achilles_release: Release, tmp_path: Path
) -> None:
    """The release runs without the operator; its objects still have to be valid."""
    operator_kinds = {"Deployment", "ServiceAccount", "Role", "RoleBinding", "Service"}
    documents = [
        d for d in render() if d["kind"] in operator_kinds or "operator" in d["metadata"]["name"]
    ]
    assert {d["kind"] for d in documents} >= operator_kinds
    manifest = tmp_path / "operator.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    kubectl = [str(bin_dir() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    result = subprocess.run(
        [*kubectl, "apply", "--server-side", "--dry-run=server", "-f", str(manifest)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "deployment.apps/achilles-operator serverside-applied (server dry run)" in result.stdout


def _quota_hard_in_status(core: client.CoreV1Api) -> dict[str, str] | None:
    """The hard limits the quota controller last computed for the runs' quota."""
    quota = core.read_namespaced_resource_quota("achilles-runs", "achilles-runs")
    return present(quota.status, "the quota's status").hard


def release_history(release: Release) -> str:
    return release.helm("history", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "yaml")


def test_upgrade_changes_quota_and_platform(
    cluster: Cluster, achilles_release: Release, admin_api: Achilles
) -> None:
    core = client.CoreV1Api(cluster.api)
    before = len(yaml.safe_load(release_history(achilles_release)))
    upgrade = (
        "upgrade", RELEASE, str(CHART_DIR), "--namespace", RELEASE_NAMESPACE,
        "--values", str(achilles_release.values_file), "--timeout", "3m",
    )  # fmt: skip
    try:
        achilles_release.helm(*upgrade, "--set", "maxConcurrency=6",
                              "--set", "platform.timezone=Europe/Berlin")  # fmt: skip
        history = yaml.safe_load(release_history(achilles_release))
        assert len(history) == before + 1
        # The pre-upgrade migration hook must have succeeded for the upgrade to complete.
        assert history[-1]["description"] == "Upgrade complete"
        assert history[-1]["status"] == "deployed"
        assert release_values(achilles_release)["maxConcurrency"] == 6
        quota = core.read_namespaced_resource_quota("achilles-runs", "achilles-runs")
        assert present(quota.spec, "the quota's spec").hard == {"pods": "6"}
        platform = admin_api.get("AgentPlatform", "default")
        assert (platform["spec"]["maxConcurrency"], platform["spec"]["timezone"]) == (
            6,
            "Europe/Berlin",
        )
        # The quota controller recomputes usage against the new hard limit.
        wait_for(
            lambda: _quota_hard_in_status(core) == {"pods": "6"},
            timeout=30,
            what="the quota's status to show the new limit",
        )
    finally:
        achilles_release.helm(*upgrade)
    platform = admin_api.get("AgentPlatform", "default")
    assert platform["spec"]["maxConcurrency"] == 4
