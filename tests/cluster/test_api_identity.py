"""The API's Kubernetes identities against the real kube-apiserver of the test cluster:
the portal's ServiceAccount token (TokenReview, audience-bound), `Impersonate-User`
honoured only with RBAC's `impersonate` grant (SubjectAccessReview), admins by
SubjectAccessReview, and a manual run written as the real run-request annotation.

The API runs in-process under a real uvicorn with the cluster's kubeconfig standing in for
its own ServiceAccount (which the chart gives `create` on the two reviews and `patch` on
Agents); tokens come from the TokenRequest API and the real OIDC provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.roles import Component
from achilles.domain.runs import RunTrigger
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT
from achilles.k8s.crd.generate import build_crd
from achilles.k8s.resources.common import API_GROUP, API_VERSION_NAME
from achilles.k8s.resources.kinds import AGENT
from achilles.services.run_requests import KubernetesRunRequester
from tests.api.support import add_runs, assert_problem, bearer, database_snapshot, make_cr_agent
from tests.api.support import served as serve
from tests.cluster.conftest import Cluster
from tests.db.logins import login_url
from tests.oidc_provider import OidcProvider
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

AUDIENCE = "achilles-api"


@dataclass(frozen=True)
class Portal:
    url: str
    namespace: str
    portal_token: str  # may impersonate alice only
    stranger_token: str  # no grant at all
    wrong_audience_token: str  # the portal's, minted for the API server's own audience


def _service_account_token(cluster: Cluster, namespace: str, name: str, *audiences: str) -> str:
    if not _exists(cluster, namespace, name):
        cluster.core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
        )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=list(audiences), expiration_seconds=600)
    )
    response: Any = cluster.core.create_namespaced_service_account_token(name, namespace, request)
    token: str = response.status.token
    return token


def _exists(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        cluster.core.read_namespaced_service_account(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _grant(
    cluster: Cluster, name: str, rules: list[dict[str, Any]], subject: dict[str, Any]
) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [subject],
        }
    )


def _revoke(cluster: Cluster, name: str) -> None:
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.delete_cluster_role_binding(name)
    rbac.delete_cluster_role(name)


def _ensure_agent_crd(cluster: Cluster) -> None:
    extensions: Any = client.ApiextensionsV1Api(cluster.api)
    try:
        extensions.create_custom_resource_definition(build_crd(AGENT))
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(AGENT.crd_name)
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for(established, 60, what="the Agent CRD to be established")


@pytest.fixture
def portal(
    cluster: Cluster,
    namespace: str,
    database_url: str,
    oidc_provider: OidcProvider,
    db: Engine,
) -> Iterator[Portal]:
    suffix = namespace[-6:]
    portal_grant, admin_grant = f"portal-impersonates-alice-{suffix}", f"admins-{suffix}"
    writer_grant = f"admin-writers-{suffix}"
    _grant(
        cluster,
        portal_grant,
        [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"],
          "resourceNames": ["alice"]}],
        {"kind": "ServiceAccount", "name": "portal", "namespace": namespace},
    )  # fmt: skip
    _grant(
        cluster,
        admin_grant,
        [{"apiGroups": ["achilles.io"], "resources": ["ownerdata"], "verbs": ["get"]}],
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:carol"},
    )
    # erin reads and writes every owner's data; carol only reads.
    _grant(
        cluster,
        writer_grant,
        [{"apiGroups": ["achilles.io"], "resources": ["ownerdata"], "verbs": ["get", "update"]}],
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:erin"},
    )
    api_login = login_url(database_url, Component.API)  # the API's own login, as installed
    settings = ApiSettings(
        database_url=api_login,
        oidc_issuer=oidc_provider.issuer,
        oidc_audience=oidc_provider.audience,
        kube_audience=AUDIENCE,
        kubeconfig=str(cluster.kubeconfig),
    )
    database = Database(api_login, pool_size=2)
    app = create_app(settings, database, run_requester=KubernetesRunRequester(cluster.kubeconfig))
    try:
        with serve(app) as url:
            yield Portal(
                url=url,
                namespace=namespace,
                portal_token=_service_account_token(cluster, namespace, "portal", AUDIENCE),
                stranger_token=_service_account_token(cluster, namespace, "stranger", AUDIENCE),
                wrong_audience_token=_service_account_token(
                    cluster, namespace, "portal", "https://kubernetes.default.svc"
                ),
            )
    finally:
        app.state.authenticator.kubernetes.reviews.close()
        database.dispose()
        _revoke(cluster, portal_grant)
        _revoke(cluster, admin_grant)
        _revoke(cluster, writer_grant)


def _as(token: str, user: str | None = None) -> dict[str, str]:
    return {**bearer(token), **({"Impersonate-User": user} if user else {})}


def test_the_portal_acts_for_the_user_rbac_lets_it_impersonate(portal: Portal, db: Engine) -> None:
    make_cr_agent(db, "alice", namespace=portal.namespace, name="helper")
    make_cr_agent(db, "bob", namespace=portal.namespace, name="bobs")

    me = httpx.get(f"{portal.url}/v1/me", headers=_as(portal.portal_token, "alice"), timeout=10)
    agents = httpx.get(
        f"{portal.url}/v1/agents", headers=_as(portal.portal_token, "alice"), timeout=10
    )

    assert me.json() == {"user_key": "alice", "is_admin": False, "via": "serviceaccount"}
    assert [agent["name"] for agent in agents.json()["items"]] == ["helper"]


@pytest.mark.parametrize(
    ("who", "impersonate", "status", "detail"),
    [
        ("portal", "bob", 403, "may not impersonate user 'bob'"),
        ("portal", None, 403, "send Impersonate-User"),
        ("stranger", "alice", 403, "may not impersonate user 'alice'"),
        ("wrong audience", "alice", 401, "not valid"),
        ("portal", "not a key!", 400, "Impersonate-User"),
    ],
)
def test_what_the_portal_may_not_do_writes_nothing(
    portal: Portal,
    cluster: Cluster,
    db: Engine,
    who: str,
    impersonate: str | None,
    status: int,
    detail: str,
) -> None:
    _ensure_agent_crd(cluster)
    make_cr_agent(db, "bob", namespace=portal.namespace, name="bobs")
    _create_agent(cluster, portal.namespace, "bobs", owner="bob")
    token = {
        "portal": portal.portal_token,
        "stranger": portal.stranger_token,
        "wrong audience": portal.wrong_audience_token,
    }[who]
    before = database_snapshot(db)

    response = httpx.post(
        f"{portal.url}/v1/agents/{portal.namespace}/bobs/runs",
        headers=_as(token, impersonate),
        timeout=10,
    )

    assert detail in assert_problem(response, status)["detail"]
    assert database_snapshot(db) == before
    assert RUN_REQUESTED_AT not in _annotations(cluster, portal.namespace, "bobs")


def test_a_manual_run_through_the_portal_writes_the_run_request(
    portal: Portal, cluster: Cluster, db: Engine
) -> None:
    _ensure_agent_crd(cluster)
    make_cr_agent(db, "alice", namespace=portal.namespace, name="helper")
    _create_agent(cluster, portal.namespace, "helper", owner="alice")

    response = httpx.post(
        f"{portal.url}/v1/agents/{portal.namespace}/helper/runs",
        headers={**_as(portal.portal_token, "alice"), "Idempotency-Key": "portal-1"},
        timeout=10,
    )

    assert response.status_code == 202, response.text
    key = response.json()["request_key"]
    assert _annotations(cluster, portal.namespace, "helper")[RUN_REQUESTED_AT] == key


def test_admins_are_who_rbac_says(portal: Portal, oidc_provider: OidcProvider, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", namespace=portal.namespace, name="helper")
    (run_id,) = add_runs(db, agent, 1)
    carol, dave = oidc_provider.token_for("carol"), oidc_provider.token_for("dave")

    me = httpx.get(f"{portal.url}/v1/me", headers=bearer(carol), timeout=10).json()
    run = httpx.get(f"{portal.url}/v1/runs/{run_id}", headers=bearer(carol), timeout=10)
    everyone = httpx.get(
        f"{portal.url}/v1/agents", params={"owner": "*"}, headers=bearer(carol), timeout=10
    )
    write = httpx.post(
        f"{portal.url}/v1/agents/{portal.namespace}/helper/runs", headers=bearer(carol), timeout=10
    )
    not_admin = httpx.get(f"{portal.url}/v1/runs/{run_id}", headers=bearer(dave), timeout=10)

    assert me == {"user_key": "carol", "is_admin": True, "via": "oidc"}
    assert run.status_code == 200
    assert run.json()["owner"] == "alice"
    assert [a["owner"] for a in everyone.json()["items"]] == ["alice"]
    assert "runs only their own" in assert_problem(write, 403)["detail"]
    assert_problem(not_admin, 404)


def test_an_admin_cancels_another_owners_run_only_with_a_write_grant(
    portal: Portal, cluster: Cluster, oidc_provider: OidcProvider, db: Engine
) -> None:
    """Reading every owner's data (`get` on `ownerdata`) is no licence to act on it: a
    cancel of someone else's run asks a review of `update` (issue 37)."""
    _ensure_agent_crd(cluster)
    agent = make_cr_agent(db, "alice", namespace=portal.namespace, name="helper")
    _create_agent(cluster, portal.namespace, "helper", owner="alice")
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id
    carol, erin = oidc_provider.token_for("carol"), oidc_provider.token_for("erin")

    read_only = httpx.post(
        f"{portal.url}/v1/runs/{run_id}/cancel", headers=bearer(carol), timeout=10
    )

    assert "write grant" in assert_problem(read_only, 403)["detail"]
    assert CANCEL_RUN not in _annotations(cluster, portal.namespace, "helper")

    writer = httpx.post(f"{portal.url}/v1/runs/{run_id}/cancel", headers=bearer(erin), timeout=10)

    assert writer.status_code == 202, writer.text
    assert _annotations(cluster, portal.namespace, "helper")[CANCEL_RUN] == str(run_id)


def _token_reviews(cluster: Cluster) -> float:
    """How many TokenReviews the API server has answered (its own metrics)."""
    method, url, headers, body, post = cluster.api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response: Any = cluster.api.call_api(method, url, headers, body, post)
    response.read()
    metrics: str = response.data.decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("apiserver_request_total{")
        and 'resource="tokenreviews"' in line
        and 'verb="POST"' in line
    )


def test_a_refused_token_is_reviewed_once(portal: Portal, cluster: Cluster) -> None:
    """A bearer that is not the issuer's is a TokenReview; the API server's refusal is
    remembered briefly, so a client repeating the token costs one review (issue 37)."""
    before = _token_reviews(cluster)
    for _ in range(5):
        response = httpx.get(
            f"{portal.url}/v1/me", headers=_as(portal.wrong_audience_token, "alice"), timeout=10
        )
        assert_problem(response, 401)
    assert _token_reviews(cluster) - before == 1


def _create_agent(cluster: Cluster, namespace: str, name: str, *, owner: str) -> None:
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        API_GROUP,
        API_VERSION_NAME,
        namespace,
        AGENT.plural,
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION_NAME}",
            "kind": AGENT.kind,
            "metadata": {"name": name},
            "spec": {"owner": owner, "prompt": "Summarise my week."},
        },
    )


def _annotations(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    agent: Any = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        API_GROUP, API_VERSION_NAME, namespace, AGENT.plural, name
    )
    annotations: dict[str, str] = agent["metadata"].get("annotations") or {}
    return annotations
