"""The API as the chart runs it: its own Deployment, Service, ServiceAccount and RBAC.

Rendering tests need only the helm binary. The rest install the chart the way
`achilles dev up` does, into a stack of their own with a real node (the API's pods run
the engine image), PostgreSQL and the dev OpenID Provider, and talk to the API from the
host through its Service's node port, as a browser or the portal's backend would: two
ready replicas, non-root on a read-only root filesystem, RBAC that is exactly what the
code calls, a portal ServiceAccount token through TokenReview and impersonation, and
40 parallel writers replying to one item over both replicas, losing and duplicating
nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.api.identity.kubernetes import CACHE_SECONDS
from achilles.db.database import Database
from achilles.db.journal.agents import find_agent_id
from achilles.errors import NotFound
from achilles.k8s.client import api_client
from achilles.services import inbox
from achilles.services.users import upsert_user
from achilles_dev import oidc
from achilles_dev.chart import CHART_DIR, RELEASE, RELEASE_NAMESPACE, install_into_stack
from achilles_dev.config import Ports, StackConfig
from achilles_dev.postgres import default_data_root
from achilles_dev.stack import LocalStack
from achilles_dev.versions import bin_dir
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, external_kubeconfig
from tests.cluster.install.test_chart import by_kind, helm, one, render
from tests.cluster.kube import present
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

API = f"{RELEASE}-api"
API_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{API}"
OWNER = "alice"
WRITERS = 40
# The API caches RBAC answers (both ways) for 10 s per replica: a new grant shows by then.
GRANT_VISIBLE_S = 40.0


# --- rendering (helm only) ---


def test_api_deployment_is_restricted_probed_and_rolls() -> None:
    documents = render()
    deployment = one(documents, "Deployment", "api")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == API
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == ["achilles"]
    assert container["args"] == ["api", "--port=8000"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {item["name"]: item for item in container["env"]}
    # A login of its own (a member of achilles_api), not the operator's.
    assert env["ACHILLES_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "achilles-api-database",
        "key": "url",
    }
    assert env["ACHILLES_API_KUBE_AUDIENCE"]["value"] == "achilles-api"
    assert "ACHILLES_API_OIDC_ISSUER" not in env  # no issuer configured: no OIDC
    assert "ACHILLES_API_WEB_CLIENT_ID" not in env
    service = one(documents, "Service", "api")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    budget = one(documents, "PodDisruptionBudget", "api")
    assert budget["spec"]["maxUnavailable"] == 1
    assert "Ingress" not in by_kind(documents)

    single = by_kind(render("api.replicas=1"))
    assert "PodDisruptionBudget" not in single
    off = render("api.enabled=false")
    assert [d["kind"] for d in off if d["metadata"]["name"].startswith(API)] == []


def test_api_rbac_is_exactly_what_the_code_calls() -> None:
    documents = render()
    role = one(documents, "ClusterRole", "-api")
    assert [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]] == [
        (["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        (["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
        (["achilles.io"], ["agents"], ["patch"]),
    ]
    binding = one(documents, "ClusterRoleBinding", "-api")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": API, "namespace": RELEASE_NAMESPACE}
    ]


def test_api_settings_come_from_values_and_secrets() -> None:
    documents = render(
        "api.oidc.issuer=https://login.example.org",
        "api.oidc.audience=achilles",
        "api.oidc.userClaim=preferred_username",
        "api.oidc.algorithms={RS256,ES256}",
        "api.web.enabled=true",
        "api.web.publicURL=https://achilles.example.org",
        "api.web.clientId=achilles-web",
        "api.web.clientSecret.secretName=web-client",
        "api.web.sessionSecret.secretName=web-session",
        "database.api.secretName=achilles-api-database",
        "api.ingress.enabled=true",
        "api.ingress.className=nginx",
        "api.ingress.host=achilles.example.org",
        "api.ingress.tls.secretName=achilles-tls",
    )
    (container,) = one(documents, "Deployment", "api")["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["ACHILLES_API_OIDC_ISSUER"]["value"] == "https://login.example.org"
    assert env["ACHILLES_API_OIDC_AUDIENCE"]["value"] == "achilles"
    assert env["ACHILLES_API_OIDC_USER_CLAIM"]["value"] == "preferred_username"
    assert env["ACHILLES_API_OIDC_ALGORITHMS"]["value"] == "RS256,ES256"
    assert env["ACHILLES_API_PUBLIC_URL"]["value"] == "https://achilles.example.org"
    assert env["ACHILLES_API_WEB_CLIENT_ID"]["value"] == "achilles-web"
    assert env["ACHILLES_API_WEB_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "web-client",
        "key": "client-secret",
    }
    assert env["ACHILLES_API_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "web-session",
        "key": "session-secret",
    }
    assert env["ACHILLES_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "achilles-api-database",
        "key": "url",
    }
    ingress = one(documents, "Ingress", "api")["spec"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"hosts": ["achilles.example.org"], "secretName": "achilles-tls"}]
    (rule,) = ingress["rules"]
    assert rule["host"] == "achilles.example.org"
    assert rule["http"]["paths"][0]["backend"]["service"] == {
        "name": API,
        "port": {"name": "http"},
    }


def test_lint_is_clean_with_every_api_option_on(tmp_path: Any) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "api:\n"
        "  oidc: {issuer: 'https://login.example.org', audience: achilles}\n"
        "  web:\n"
        "    enabled: true\n"
        "    publicURL: https://achilles.example.org\n"
        "    clientId: achilles-web\n"
        "    clientSecret: {secretName: web-client, key: client-secret}\n"
        "    sessionSecret: {secretName: web-session, key: session-secret}\n"
        "  ingress: {enabled: true, host: achilles.example.org, tls: {secretName: tls}}\n"
        "  service: {type: NodePort, nodePort: 30080}\n"
    )
    result = helm("lint", "--strict", str(CHART_DIR), "--values", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (("api.replicas=-1",), "at '/api/replicas'"),
        (("api.service.type=External",), "at '/api/service/type'"),
        (("api.oidc.algorithms={HS256}",), "at '/api/oidc/algorithms/0'"),
        (("api.oidc.issuer=ftp://login.example.org",), "at '/api/oidc/issuer'"),
        (("api.port=80",), "at '/api/port'"),
        (("api.service.nodePort=80",), "at '/api/service/nodePort'"),
        (("api.ingress.host=Not A Host",), "at '/api/ingress/host'"),
        (("api.replica=2",), "additional properties 'replica' not allowed"),
        (
            ("api.oidc.issuer=https://login.example.org",),
            "api.oidc.issuer and api.oidc.audience must be set together",
        ),
        (("api.web.enabled=true",), "api.web.enabled needs api.oidc.issuer"),
        (
            (
                "api.oidc.issuer=https://login.example.org",
                "api.oidc.audience=achilles",
                "api.web.enabled=true",
                "api.web.clientId=web",
                "api.web.clientSecret.secretName=web",
                "api.web.sessionSecret.secretName=session",
            ),
            "api.web.enabled needs api.web.publicURL",
        ),
        (("api.ingress.enabled=true",), "api.ingress.enabled needs api.ingress.host"),
        (("api.service.nodePort=30080",), "api.service.nodePort needs api.service.type"),
    ],
)
def test_bad_api_values_are_refused_with_the_reason(
    settings: tuple[str, ...], complaint: str
) -> None:
    args = ["template", RELEASE, str(CHART_DIR)]
    for setting in settings:
        args += ["--set", setting]
    result = helm(*args, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


# --- on a real node ---


@dataclass(frozen=True)
class ApiStack:
    stack: LocalStack
    api: client.ApiClient
    database: Database

    @property
    def url(self) -> str:
        return self.stack.config.api_url

    def pod_urls(self) -> list[str]:
        pods = client.CoreV1Api(self.api).list_namespaced_pod(
            RELEASE_NAMESPACE, label_selector="app.kubernetes.io/component=api"
        )
        return [f"http://{present(pod.status, 'a pod status').pod_ip}:8000" for pod in pods.items]


@pytest.fixture(scope="module")
def api_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiStack]:
    if external_kubeconfig() is not None or os.geteuid() != 0:
        pytest.skip(
            f"a stack of our own with a real node (needs root; {EXTERNAL_KUBECONFIG} unset)"
        )
    postgres_dir = default_data_root() / f"test-api-{uuid.uuid4().hex[:8]}"
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("api"),
        ports=Ports.free(),
        postgres_dir=postgres_dir,
        durable=False,
        node="containerd",
    )
    stack = LocalStack(config)
    database = Database(config.database_url)
    try:
        stack.up()
        install_into_stack(stack)  # returns once the API answers from the host
        with api_client(config.kubeconfig) as api:
            yield ApiStack(stack=stack, api=api, database=database)
    finally:
        database.dispose()
        stack.down()
        shutil.rmtree(postgres_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def alice_token(api_stack: ApiStack) -> str:
    return oidc.token_for(api_stack.stack.config.oidc_issuer, OWNER)


@pytest.fixture(scope="module")
def alice_item(api_stack: ApiStack) -> int:
    """A blocked item of an agent of alice's: its Agent applied as the portal would, its
    row written by the operator Deployment, its question asked as the agent would."""
    upsert_user(api_stack.database, OWNER, timezone=None, active=True)
    namespace, name = "default", f"api-{uuid.uuid4().hex[:6]}"
    agent = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "Agent",
        "metadata": {"name": name},
        # No model: the agent never runs, so nothing but the test touches its board.
        "spec": {"owner": OWNER, "prompt": "Summarise my week."},
    }
    client.CustomObjectsApi(api_stack.api).create_namespaced_custom_object(
        "achilles.io", "v1alpha1", namespace, "agents", agent
    )

    def mirrored() -> int | None:
        try:
            with api_stack.database.transaction() as session:
                return find_agent_id(session, name)  # the row's name: the CR's (unique)
        except NotFound:
            return None

    wait_for(mirrored, 90, what="the operator to write the Agent's row", interval=0.5)
    asked = inbox.ask(api_stack.database, name, "db", "Which database?")
    return asked.item.id


def _bearer(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


def test_two_replicas_ready_non_root_on_a_read_only_root(api_stack: ApiStack) -> None:
    apps = client.AppsV1Api(api_stack.api)
    deployment = apps.read_namespaced_deployment(API, RELEASE_NAMESPACE)
    assert deployment.spec.replicas == 2
    # The stack's install returns once one replica answers; the second may start later
    # on a busy node.
    wait_for(
        lambda: (
            present(
                apps.read_namespaced_deployment(API, RELEASE_NAMESPACE).status,
                "the Deployment's status",
            ).ready_replicas
            == 2
        ),
        120,
        what="both replicas Ready",
    )

    def ready_endpoints() -> int:
        endpoints = client.DiscoveryV1Api(api_stack.api).list_namespaced_endpoint_slice(
            RELEASE_NAMESPACE, label_selector=f"kubernetes.io/service-name={API}"
        )
        return len(
            [
                e
                for s in endpoints.items
                for e in s.endpoints or []
                if e.conditions and e.conditions.ready
            ]
        )

    wait_for(lambda: ready_endpoints() == 2, 60, what="both behind the Service")
    # What the processes really are, asked inside each container.
    probe = "import os; print(os.getuid(), bool(os.statvfs('/').f_flag & os.ST_RDONLY))"
    pods = client.CoreV1Api(api_stack.api).list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector="app.kubernetes.io/component=api"
    )
    assert len(pods.items) == 2
    for pod in pods.items:
        pod_name = present(pod.metadata, "a pod's metadata").name or ""
        seen = kubectl(api_stack, "exec", "-n", RELEASE_NAMESPACE, pod_name, "--",
                       "python", "-c", probe)  # fmt: skip
        assert seen.split() == ["10001", "True"]  # uid 10001, / mounted read-only
    assert httpx.get(f"{api_stack.url}/healthz", timeout=10).json() == {"status": "ok"}
    assert httpx.get(f"{api_stack.url}/readyz", timeout=10).json() == {"status": "ready"}


def kubectl(api_stack: ApiStack, *args: str) -> str:
    done = subprocess.run(
        [str(bin_dir() / "kubectl"), "--kubeconfig", str(api_stack.stack.config.kubeconfig),
         *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _may(api_stack: ApiStack, verb: str, resource: str, group: str = "", **more: str) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=API_USER,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NAMESPACE}",
                    "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, **more
            ),
        )
    )  # fmt: skip
    result = client.AuthorizationV1Api(api_stack.api).create_subject_access_review(review)
    return bool(present(result.status, "the review's status").allowed)


def test_the_api_service_account_may_do_only_what_the_api_does(api_stack: ApiStack) -> None:
    allowed = [
        ("create", "tokenreviews", "authentication.k8s.io", {}),
        ("create", "subjectaccessreviews", "authorization.k8s.io", {}),
        ("patch", "agents", "achilles.io", {"namespace": "default"}),
        ("patch", "agents", "achilles.io", {"namespace": "team-a", "name": "digest"}),
    ]
    refused = [
        ("get", "agents", "achilles.io", {"namespace": "default"}),
        ("list", "agents", "achilles.io", {}),
        ("delete", "agents", "achilles.io", {"namespace": "default"}),
        ("update", "agents", "achilles.io", {"namespace": "default"}),
        ("patch", "agents/status", "achilles.io", {"namespace": "default"}),
        ("patch", "agentplatforms", "achilles.io", {}),
        ("get", "ownerdata", "achilles.io", {}),
        ("get", "secrets", "", {"namespace": RELEASE_NAMESPACE}),
        ("create", "pods", "", {"namespace": RELEASE_NAMESPACE}),
        ("create", "jobs", "batch", {"namespace": "achilles-runs"}),
        ("impersonate", "users", "", {"name": OWNER}),
        ("create", "serviceaccounts/token", "", {"namespace": RELEASE_NAMESPACE}),
    ]
    assert [a[:3] for a in allowed if not _may(api_stack, a[0], a[1], a[2], **a[3])] == []
    assert [r[:3] for r in refused if _may(api_stack, r[0], r[1], r[2], **r[3])] == []


def test_a_person_reads_their_own_identity_through_the_service(
    api_stack: ApiStack, alice_token: str
) -> None:
    me = httpx.get(f"{api_stack.url}/v1/me", headers=_bearer(alice_token), timeout=10)
    assert me.status_code == 200, me.text
    assert me.json() == {"user_key": OWNER, "is_admin": False, "via": "oidc"}
    anonymous = httpx.get(f"{api_stack.url}/v1/me", timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"].startswith("application/problem+json")


@pytest.fixture
def portal(api_stack: ApiStack) -> Iterator[tuple[str, str]]:
    """A portal's ServiceAccount (namespace, name) in a namespace of its own."""
    core = client.CoreV1Api(api_stack.api)
    namespace = f"portal-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="portal"))
    )
    yield namespace, "portal"
    rbac = client.RbacAuthorizationV1Api(api_stack.api)
    for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
        try:
            delete(namespace)
        except ApiException as error:
            if error.status != 404:
                raise
    core.delete_namespace(namespace)


def _token(api_stack: ApiStack, namespace: str, name: str, audience: str | None) -> str:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[audience] if audience else [], expiration_seconds=600
        )
    )
    created = client.CoreV1Api(api_stack.api).create_namespaced_service_account_token(
        name, namespace, request
    )
    return str(present(created.status, "the token request's status").token)


def _grant_impersonation(api_stack: ApiStack, namespace: str, name: str, user: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api_stack.api)
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=namespace),
            rules=[
                client.V1PolicyRule(
                    api_groups=[""], resources=["users"], verbs=["impersonate"],
                    resource_names=[user],
                )
            ],
        )
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=namespace),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=namespace
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
        )
    )


def test_a_portal_service_account_acts_for_a_person_only_with_the_rbac_grant(
    api_stack: ApiStack, portal: tuple[str, str], alice_item: int
) -> None:
    namespace, name = portal
    token = _token(api_stack, namespace, name, "achilles-api")
    me = f"{api_stack.url}/v1/me"

    def as_alice() -> httpx.Response:
        return httpx.get(me, headers=_bearer(token, **{"Impersonate-User": OWNER}), timeout=10)

    refused = as_alice()
    assert refused.status_code == 403, refused.text
    assert "may not impersonate user 'alice'" in refused.json()["detail"]
    nobody = httpx.get(me, headers=_bearer(token), timeout=10)
    assert nobody.status_code == 403  # a ServiceAccount acts only for a person
    # A token of the same account for another audience (the Kubernetes API's) is no key.
    other_audience = _token(api_stack, namespace, name, None)
    assert httpx.get(me, headers=_bearer(other_audience), timeout=10).status_code == 401

    last_refusal = time.monotonic()  # the refusal above is cached by the replica it hit
    _grant_impersonation(api_stack, namespace, name, OWNER)

    def admitted_by_every_replica() -> httpx.Response | None:
        """A replica keeps a refusal for CACHE_SECONDS from when it asked, and every
        refusal cached anywhere was one of ours: once the latest is that old, whichever
        replica answers next knows of the grant (one admission alone says nothing of the
        other replica's cached refusal)."""
        nonlocal last_refusal
        response = as_alice()
        if response.status_code != 200:
            last_refusal = time.monotonic()
            return None
        return response if time.monotonic() - last_refusal > CACHE_SECONDS else None

    granted = wait_for(
        admitted_by_every_replica,
        GRANT_VISIBLE_S,
        what="the impersonation grant to take effect on every replica",
        interval=0.5,
    )
    assert granted.json() == {"user_key": OWNER, "is_admin": False, "via": "serviceaccount"}
    # Acting as alice, it reads alice's item, and only for alice.
    item = httpx.get(
        f"{api_stack.url}/v1/inbox/{alice_item}",
        headers=_bearer(token, **{"Impersonate-User": OWNER}),
        timeout=10,
    )
    assert item.status_code == 200, item.text
    bob = httpx.get(me, headers=_bearer(token, **{"Impersonate-User": "bob"}), timeout=10)
    assert bob.status_code == 403


def pods_state(api_stack: ApiStack) -> list[str]:
    """Each API pod's readiness and restarts, for a failure message."""
    pods = client.CoreV1Api(api_stack.api).list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector="app.kubernetes.io/component=api"
    )
    return [
        f"{pod.metadata.name if pod.metadata else '?'}: "
        + ", ".join(
            f"ready={c.ready} restarts={c.restart_count} last={c.last_state}"
            for c in (pod.status.container_statuses if pod.status else None) or []
        )
        for pod in pods.items
    ]


@dataclass
class Writer:
    """One of the parallel writers: its reply, its attempts, what it saw."""

    index: int
    written: dict[str, Any] | None = None
    attempts: int = 0


def test_two_replicas_lose_no_reply_and_duplicate_none_under_parallel_writers(
    api_stack: ApiStack, alice_token: str, alice_item: int
) -> None:
    """40 writers reply to one item at once. Each reads the revision (through the
    Service) and sends its reply with If-Match and an Idempotency-Key three times at
    once: through the Service and straight to each replica. A stale revision is 412 on
    every copy and the writer tries again over the new one, with a new key. In the end
    every writer's reply was written exactly once: the three copies of the accepted
    request gave one response (one write, two replays), and the item's history holds
    each reply once."""
    replicas = api_stack.pod_urls()
    assert len(replicas) == 2
    targets = [api_stack.url, *replicas]
    item_url = f"/v1/inbox/{alice_item}"
    before = httpx.get(f"{api_stack.url}{item_url}", headers=_bearer(alice_token), timeout=10)
    assert before.status_code == 200, before.text
    serial_before = before.json()["reply_serial"]
    start = threading.Barrier(WRITERS)
    failures: list[str] = []

    def write(writer: Writer) -> Writer:
        text = f"reply {writer.index}"
        with httpx.Client(timeout=60, headers=_bearer(alice_token)) as http:
            start.wait()
            revision = http.get(f"{api_stack.url}{item_url}").json()["revision"]
            while writer.written is None:
                writer.attempts += 1
                key = f"writer-{writer.index}-{writer.attempts}"

                def send(base: str, revision: int = revision, key: str = key) -> httpx.Response:
                    try:
                        return http.post(
                            f"{base}{item_url}/reply",
                            json={"kind": "answer", "text": text, "channel": "inbox"},
                            headers={"If-Match": f'"{revision}"', "Idempotency-Key": key},
                        )
                    except httpx.HTTPError as error:
                        raise AssertionError(f"{key} to {base}: {error!r}") from error

                with ThreadPoolExecutor(len(targets)) as copies:
                    responses = list(copies.map(send, targets))
                statuses = {r.status_code for r in responses}
                replayed = [r.headers.get("idempotent-replayed") == "true" for r in responses]
                seen = f"{key}: {[(r.status_code, r.text[:120]) for r in responses]}, {replayed}"
                if statuses == {200}:
                    # One write, two replays of its response, wherever each copy went.
                    documents = [r.json() for r in responses]
                    if sum(replayed) != 2 or any(d != documents[0] for d in documents):
                        failures.append(seen)
                        return writer
                    writer.written = responses[0].json()
                elif statuses == {412}:
                    # A refusal writes nothing and is not remembered: each copy is judged
                    # on its own, against a revision that only grows.
                    revision = max(r.json()["current_revision"] for r in responses)
                else:
                    failures.append(seen)
                    return writer
        return writer

    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            writers = list(pool.map(write, [Writer(i) for i in range(WRITERS)]))
    except AssertionError as error:
        raise AssertionError(f"{error}; the API's pods: {pods_state(api_stack)}") from error
    assert failures == []
    assert all(w.written is not None for w in writers)
    after = httpx.get(f"{api_stack.url}{item_url}", headers=_bearer(alice_token), timeout=10)
    detail = after.json()
    assert detail["reply_serial"] == serial_before + WRITERS
    replies = Counter(r["reply"] for r in detail["history"] if r["change"] == "replied")
    assert replies == Counter(f"reply {i}" for i in range(WRITERS))
    assert {r["reply_by"] for r in detail["history"] if r["change"] == "replied"} == {OWNER}
    # Each write saw its own reply land, at a serial of its own.
    serials = [w.written["item"]["reply_serial"] for w in writers if w.written]
    assert sorted(serials) == list(range(serial_before + 1, serial_before + WRITERS + 1))


def test_a_run_request_annotates_the_agent_through_the_apis_own_rbac(
    api_stack: ApiStack, alice_token: str
) -> None:
    """POST /v1/agents/{namespace}/{name}/runs: the API's ServiceAccount patches the
    Agent's run-request annotation (its ClusterRole's one write)."""
    custom = client.CustomObjectsApi(api_stack.api)
    suffix = uuid.uuid4().hex[:6]
    model_name = f"api-model-{suffix}"
    model: dict[str, Any] = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "AgentModel",
        "metadata": {"name": model_name},
        "spec": {"baseURL": api_stack.stack.config.model_server_url, "model": "achilles-demo"},
    }
    custom.create_cluster_custom_object("achilles.io", "v1alpha1", "agentmodels", model)
    namespace, name = "default", f"api-run-{suffix}"
    agent = {
        "apiVersion": "achilles.io/v1alpha1",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": {"owner": OWNER, "prompt": "Say hello.", "model": model_name},
    }
    custom.create_namespaced_custom_object("achilles.io", "v1alpha1", namespace, "agents", agent)
    url = f"{api_stack.url}/v1/agents/{namespace}/{name}/runs"

    def requested() -> httpx.Response | None:
        # 404 until the operator wrote the row, 409 until it saw the model.
        response = httpx.post(url, headers=_bearer(alice_token), timeout=10)
        return response if response.status_code == 202 else None

    accepted = wait_for(requested, 90, what="the run request to be accepted", interval=1.0)
    key = accepted.json()["request_key"]
    written: Any = custom.get_namespaced_custom_object(
        "achilles.io", "v1alpha1", namespace, "agents", name
    )
    assert written["metadata"]["annotations"]["achilles.io/run-requested-at"] == key
