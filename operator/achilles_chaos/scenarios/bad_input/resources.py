"""Custom resources the API server must refuse: malformed CRs and patches, and admin-only
fields written by someone who is no admin."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.client import api_client
from achilles_chaos.kube import Kube, manifest, refusal
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios.bad_input.common import OWNER, PORTAL_USER
from achilles_chaos.waiting import wait_for

GOOD_AGENT: dict[str, Any] = {"owner": OWNER, "prompt": "hello"}


def _agent(**spec: Any) -> dict[str, Any]:
    return {**GOOD_AGENT, **spec}


@dataclass(frozen=True)
class BadResource:
    id: str
    body: dict[str, Any]
    says: str  # what the refusal must mention (the field, or the rule)


def _bad_resources() -> list[BadResource]:
    agent = "Agent"
    weekly = {"type": "calendar", "cadence": "weekly", "time": "09:00"}
    cases: list[tuple[str, str, str, dict[str, Any] | None, str]] = [
        ("no-spec", agent, "nospec", None, "spec"),
        ("empty-spec", agent, "empty", {}, "owner"),
        ("owner-number", agent, "ownernum", _agent(owner=42), "spec.owner"),
        ("owner-empty", agent, "ownerempty", _agent(owner=""), "spec.owner"),
        ("owner-newline", agent, "ownernl", _agent(owner="bob\nrm -rf /"), "spec.owner"),
        ("prompt-null", agent, "promptnull", _agent(prompt=None), "prompt"),
        ("prompt-list", agent, "promptlist", _agent(prompt=["a", "b"]), "spec.prompt"),
        ("prompt-100k", agent, "promptbig", _agent(prompt="p" * 100_000), "spec.prompt"),
        ("schedule-string", agent, "schedstr", _agent(schedule="every day"), "spec.schedule"),
        (
            "interval-fraction",
            agent,
            "frac",
            _agent(schedule={"type": "interval", "everyHours": 1.5}),
            "spec.schedule.everyHours",
        ),
        (
            "interval-huge",
            agent,
            "huge",
            _agent(schedule={"type": "interval", "everyHours": 10**12}),
            "spec.schedule.everyHours",
        ),
        (
            "time-25h",
            agent,
            "t25",
            _agent(schedule={"type": "calendar", "cadence": "daily", "time": "25:00"}),
            "spec.schedule.time",
        ),
        (
            "weekday-name",
            agent,
            "wdname",
            _agent(schedule={**weekly, "weekday": "monday"}),
            "spec.schedule.weekday",
        ),
        (
            "type-capitalised",
            agent,
            "typecap",
            _agent(schedule={"type": "Interval", "everyHours": 2}),
            "spec.schedule.type",
        ),
        ("tools-string", agent, "toolsstr", _agent(tools="inbox"), "spec.tools"),
        ("tools-empty-name", agent, "toolsempty", _agent(tools=[""]), "spec.tools"),
        ("tools-500", agent, "tools500", _agent(tools=[f"t{i}" for i in range(500)]), "spec.tools"),
        ("model-path", agent, "modelpath", _agent(model="../etc/passwd"), "spec.model"),
        ("model-300", agent, "model300", _agent(model="m" * 300), "spec.model"),
        ("enabled-string", agent, "enstr", _agent(enabled="true"), "spec.enabled"),
        ("enabled-number", agent, "ennum", _agent(enabled=1), "spec.enabled"),
        ("display-10k", agent, "disp", _agent(displayName="d" * 10_000), "spec.displayName"),
        ("unknown-field", agent, "unknown", _agent(replicas=3), "replicas"),
        ("name-uppercase", agent, "Bad_Name", _agent(), "metadata.name"),
        ("name-300", agent, "n" * 300, _agent(), "metadata.name"),
        (
            "model-javascript-url",
            "AgentModel",
            "x-js",
            {"baseURL": "javascript:alert(1)", "model": "m"},
            "spec.baseURL",
        ),
        ("model-no-url", "AgentModel", "x-nourl", {"model": "m"}, "spec.baseURL"),
        (
            "model-empty-id",
            "AgentModel",
            "x-emptyid",
            {"baseURL": "http://a/v1", "model": ""},
            "spec.model",
        ),
        (
            "model-default-yes",
            "AgentModel",
            "x-defyes",
            {"baseURL": "http://a/v1", "model": "m", "default": "yes"},
            "spec.default",
        ),
        (
            "model-secret-no-key",
            "AgentModel",
            "x-nokey",
            {"baseURL": "http://a/v1", "model": "m", "apiKeySecretRef": {"name": "s"}},
            "spec.apiKeySecretRef.key",
        ),
        ("tool-empty-impl", "AgentTool", "x-tool1", {"implementation": ""}, "spec.implementation"),
        (
            "tool-allowed-no",
            "AgentTool",
            "x-tool2",
            {"implementation": "inbox", "agentsAllowed": "no"},
            "spec.agentsAllowed",
        ),
        ("platform-other-name", "AgentPlatform", "other", {}, "metadata.name"),
    ]
    resources = []
    for case_id, kind, name, spec, says in cases:
        body = manifest(kind, name, spec if spec is not None else {})
        if spec is None:
            del body["spec"]
        resources.append(BadResource(case_id, body, says))
    return resources


# Patches of AgentPlatform/default and of a valid Agent that the API server must refuse.
BAD_PLATFORM_PATCHES: list[tuple[str, dict[str, Any], str]] = [
    ("platform-negative-cap", {"maxConcurrency": -5}, "spec.maxConcurrency"),
    ("platform-mars-zone", {"timezone": "Mars/Olympus"}, "spec.timezone"),
    ("platform-zero-timeout", {"runTimeoutSeconds": 0}, "spec.runTimeoutSeconds"),
    ("platform-budget-text", {"weeklyTokenBudget": "lots"}, "spec.weeklyTokenBudget"),
]
BAD_AGENT_PATCHES: list[tuple[str, dict[str, Any], str]] = [
    ("owner-changed", {"owner": "eve"}, "owner"),
    ("schedule-broken", {"schedule": {"type": "interval"}}, "spec.schedule.everyHours"),
]


def refusals(ctx: Context) -> tuple[int, list[str]]:
    """Create or patch every bad resource; (how many were refused well, what went wrong)."""
    kube = ctx.kube
    problems: list[str] = []
    refused = 0

    def expect_refusal(case_id: str, call: Callable[[], Any], says: str) -> None:
        nonlocal refused
        try:
            call()
        except ApiException as error:
            message = refusal(error)
            if error.status in (400, 403, 404, 422) and says.lower() in message.lower():
                refused += 1
            else:
                problems.append(
                    f"{case_id}: refused {error.status} without naming {says}: {message[:200]}"
                )
            return
        problems.append(f"{case_id}: accepted")

    for case in _bad_resources():
        namespace = ctx.namespace if case.body["kind"] == "Agent" else None
        expect_refusal(case.id, partial(kube.create, case.body, namespace), case.says)
    for case_id, patch, says in BAD_PLATFORM_PATCHES:
        expect_refusal(
            case_id,
            partial(kube.patch, "AgentPlatform", "default", {"spec": patch}),
            says,
        )
    ctx.agent("patched", "hello", None, owner=OWNER)
    for case_id, patch, says in BAD_AGENT_PATCHES:
        expect_refusal(
            case_id,
            partial(kube.patch, "Agent", "patched", {"spec": patch}, ctx.namespace),
            says,
        )
    # Only admins may pause: the portal's identity is refused by the admission policy.
    binding = _bind_portal(kube)
    try:
        with api_client(ctx.cluster.kubeconfig) as portal_api:
            portal_api.default_headers["Impersonate-User"] = PORTAL_USER
            portal = Kube(portal_api)
            body = manifest("Agent", "sneaky", _agent(adminPaused=True))
            expect_refusal(
                "portal-sets-admin-paused",
                partial(portal.create, body, ctx.namespace),
                "adminPaused",
            )
    finally:
        client.RbacAuthorizationV1Api(kube.api).delete_cluster_role_binding(binding)
    # A second default model: the single-default policy refuses it. The policy sees the
    # AgentModels through the API server's own informer, a moment after their create (a
    # create right after the first was once let through, 2026-12-03): wait, by dry runs,
    # until it refuses, as tests/cluster/install/test_crd_admission.py does.
    first = ctx.model("default-a", default=True)
    second = manifest(
        "AgentModel", f"{first}-b", {"baseURL": "http://a/v1", "model": "m", "default": True}
    )
    wait_for(
        lambda: _refused(lambda: kube.create(second, dry_run=True)),
        30,
        what="the single-default policy to see the first default",
    )
    expect_refusal("second-default-model", lambda: kube.create(second), "default")
    kube.patch("AgentModel", first, {"spec": {"default": False}})
    return refused, problems


def _refused(call: Callable[[], Any]) -> bool | None:
    """True when the API server refused the call (None, to wait on, when it accepted)."""
    try:
        call()
    except ApiException:
        return True
    return None


def _bind_portal(kube: Kube) -> str:
    name = f"chaos-portal-{int(time.time())}"
    rbac = client.RbacAuthorizationV1Api(kube.api)
    roles = [
        role.metadata.name
        for role in rbac.list_cluster_role().items
        if role.metadata and role.metadata.name and role.metadata.name.endswith("-portal")
    ]
    if not roles:
        raise RuntimeError("the chart's portal ClusterRole is missing")
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=roles[0]
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="User", name=PORTAL_USER, api_group="rbac.authorization.k8s.io"
                )
            ],
        )
    )
    return name
