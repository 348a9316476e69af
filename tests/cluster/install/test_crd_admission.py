"""The real API server enforces the CRDs and the chart's admission policies.

Invalid manifests are refused with a message that names the field, and pydantic refuses
exactly the same ones (tests/crd_cases.py is the shared table); the portal may write
Agents but not their admin lock; nobody may change an Agent's owner; at most one
AgentModel is the default.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources import AgentStatus
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles, rejection, verdict
from tests.cluster.install.conftest import POLICY_MESSAGE, Release
from tests.crd_cases import (
    EXAMPLES,
    INVALID,
    VALID,
    Case,
    agent,
    agent_model,
    agent_platform,
    pydantic_verdict,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def update_as_helm(api: Achilles, platform: dict[str, Any]) -> dict[str, Any]:
    """A dry-run update of the chart's AgentPlatform/default as its release (Helm) makes it:
    the platform-owner policy refuses anyone else's (test_platform_owner.py)."""
    current = api.get("AgentPlatform", "default")["metadata"]["resourceVersion"]
    manifest = {**platform, "metadata": {**platform["metadata"], "resourceVersion": current}}
    return api.replace(manifest, dry_run=True, field_manager="helm")


def unique(case: Case) -> dict[str, Any]:
    """The case's manifest under a name no other test uses (except the singleton)."""
    manifest: dict[str, Any] = yaml.safe_load(yaml.safe_dump(case.manifest))
    if case.kind != "AgentPlatform":
        manifest["metadata"]["name"] = f"{case.name}-{uuid.uuid4().hex[:6]}"
    return manifest


# --- the case table: the API server and pydantic agree, messages name the field ---


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_invalid_manifest_is_rejected_naming_the_field(
    case: Case, admin_api: Achilles, achilles_release: Release
) -> None:
    manifest = unique(case)
    # A create, as `kubectl apply` sends for a new object; dry run: nothing is stored.
    # (Validation runs before the existence check, so AgentPlatform/default works too.)
    server = verdict(lambda: admin_api.create(manifest, "default", dry_run=True))
    assert server is not None, f"the API server accepted {case.id}"
    assert case.field is not None
    assert case.field in server, server
    local = pydantic_verdict(case.manifest)
    assert local is not None, f"pydantic accepted {case.id}, the API server did not: {server}"
    assert case.field in local, local


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.id)
def test_valid_manifest_is_accepted(
    case: Case, admin_api: Achilles, achilles_release: Release
) -> None:
    assert pydantic_verdict(case.manifest) is None
    manifest = unique(case)
    if case.kind == "AgentPlatform":
        # The chart's object exists: an update, which its release makes with Helm (the
        # platform-owner policy refuses anyone else's, see test_platform_owner.py).
        accepted = verdict(lambda: update_as_helm(admin_api, manifest))
    else:
        accepted = verdict(lambda: admin_api.create(manifest, "default", dry_run=True))
    assert accepted is None


def test_at_least_twenty_invalid_manifests_across_every_kind() -> None:
    assert len(INVALID) >= 20
    assert {case.kind for case in INVALID} == {
        "Agent", "AgentModel", "AgentTool", "AgentPlatform",
    }  # fmt: skip


def test_examples_apply_and_show_in_kubectl_get(
    admin_api: Achilles, achilles_release: Release, namespace: str
) -> None:
    kubectl = achilles_release.install.kubectl
    documents = [yaml.safe_load(path.read_text()) for path in EXAMPLES]
    applied: list[dict[str, Any]] = []
    try:
        for document in documents:
            document["metadata"].pop("namespace", None)
            assert pydantic_verdict(document) is None
            applied.append(admin_api.apply(document, namespace))
        table = kubectl("get", "agents", "-n", namespace, "--sort-by=.metadata.name").splitlines()
        header = table[0].split()
        assert header == [
            "NAME", "OWNER", "ENABLED", "ADMIN-PAUSED", "MODEL", "SCHEDULE", "NEXT-RUN",
            "LAST-STATE", "PHASE", "AGE",
        ]  # fmt: skip
        assert table[1].split()[:5] == ["inbox-triage", "bob", "true", "false", "gpt-small"]
        assert table[2].split()[:5] == ["weekly-digest", "alice", "true", "false", "gpt-small"]
        short = kubectl("get", "ag,agm,agt,agp", "-A", "-o", "name")
        assert "agent.achilles.io/weekly-digest" in short
        assert "agentmodel.achilles.io/gpt-small" in short
        assert "agenttool.achilles.io/inbox" in short
        assert "agentplatform.achilles.io/default" in short  # the chart's
    finally:
        for document in applied:
            if document["kind"] in ("AgentModel", "AgentTool"):
                admin_api.delete(document["kind"], document["metadata"]["name"])


def test_an_unknown_time_zone_is_refused_in_plain_words(admin_api: Achilles) -> None:
    """Not the rule's raw CEL text ("unknown time zone X evaluating rule: ...")."""
    platform = agent_platform(timezone="Europe/Berln")
    status, message = rejection(lambda: update_as_helm(admin_api, platform))
    assert status == 422
    assert (
        "spec.timezone: Invalid value: \"Europe/Berln\": unknown time zone 'Europe/Berln'"
        " (expected an IANA name like Europe/Berlin)"
    ) in message
    assert "evaluating rule" not in message


def test_null_fields_are_absent_and_defaults_apply(admin_api: Achilles, namespace: str) -> None:
    stored = admin_api.create(agent("nulls", enabled=None, schedule=None, model=None), namespace)
    assert stored["spec"] == {
        "owner": "alice",
        "prompt": "Summarise my week.",
        "enabled": True,
        "adminPaused": False,
    }


# --- spec.adminPaused: the admin's lock, guarded by the chart's policy ---


def test_portal_creates_and_edits_an_agent(portal_api: Achilles, namespace: str) -> None:
    created = portal_api.create(agent("digest", model="gpt-small"), namespace)
    assert created["spec"]["adminPaused"] is False  # defaulted, which is not "setting" it
    edited = portal_api.patch(
        "Agent", "digest", {"spec": {"prompt": "New prompt", "enabled": False}}, namespace
    )
    assert edited["spec"]["prompt"] == "New prompt"
    # Writing the unchanged value explicitly is no change either.
    portal_api.patch("Agent", "digest", {"spec": {"adminPaused": False}}, namespace)


def test_portal_cannot_create_an_agent_paused(portal_api: Achilles, namespace: str) -> None:
    status, message = rejection(
        lambda: portal_api.create(agent("paused", adminPaused=True), namespace)
    )
    assert status == 403
    assert POLICY_MESSAGE in message
    assert "ValidatingAdmissionPolicy" in message


def test_portal_cannot_flip_admin_paused_and_an_admin_can(
    portal_api: Achilles, achilles_admin_api: Achilles, namespace: str
) -> None:
    portal_api.create(agent("digest"), namespace)

    status, message = rejection(
        lambda: portal_api.patch("Agent", "digest", {"spec": {"adminPaused": True}}, namespace)
    )
    assert (status, POLICY_MESSAGE in message) == (403, True)

    paused = achilles_admin_api.patch("Agent", "digest", {"spec": {"adminPaused": True}}, namespace)
    assert paused["spec"]["adminPaused"] is True

    # The portal still edits everything else of a paused agent...
    portal_api.patch("Agent", "digest", {"spec": {"prompt": "Still mine"}}, namespace)
    # ...but cannot lift the lock, neither by setting it false nor by leaving it out of
    # a full update (the default would clear it).
    status, message = rejection(
        lambda: portal_api.patch("Agent", "digest", {"spec": {"adminPaused": False}}, namespace)
    )
    assert (status, POLICY_MESSAGE in message) == (403, True)
    current = portal_api.get("Agent", "digest", namespace)
    del current["spec"]["adminPaused"]
    status, message = rejection(lambda: portal_api.replace(current, namespace))
    assert (status, POLICY_MESSAGE in message) == (403, True)

    lifted = achilles_admin_api.patch(
        "Agent", "digest", {"spec": {"adminPaused": False}}, namespace
    )
    assert lifted["spec"]["adminPaused"] is False


DELETE_MESSAGE = "an admin paused this Agent (spec.adminPaused: true): only members of"


def test_an_admins_pause_is_not_shed_by_deleting_and_creating_the_agent_again(
    portal_api: Achilles, achilles_admin_api: Achilles, namespace: str
) -> None:
    """Issue 36 item 1: deleting a paused Agent and creating it again without the lock
    would lift the admin's lock (seed 000: only an admin lifts it). The portal may delete
    Agents, but not one under the lock."""
    portal_api.create(agent("digest"), namespace)
    achilles_admin_api.patch("Agent", "digest", {"spec": {"adminPaused": True}}, namespace)

    status, message = rejection(lambda: portal_api.delete("Agent", "digest", namespace))
    assert (status, DELETE_MESSAGE in message) == (403, True), message
    assert "ask one to lift the pause first" in message
    assert portal_api.get("Agent", "digest", namespace)["spec"]["adminPaused"] is True
    status, _ = rejection(lambda: portal_api.create(agent("digest"), namespace))
    assert status == 409  # it is still there, under the lock

    # Lifted by an admin, it is the owner's to delete again; an admin may delete it anyway.
    achilles_admin_api.patch("Agent", "digest", {"spec": {"adminPaused": False}}, namespace)
    portal_api.delete("Agent", "digest", namespace)
    achilles_admin_api.create(agent("paused", adminPaused=True), namespace)
    achilles_admin_api.delete("Agent", "paused", namespace)


def test_a_namespace_with_a_paused_agent_still_empties(
    cluster: Cluster, achilles_admin_api: Achilles
) -> None:
    """Kubernetes' own controllers may delete a paused Agent (the namespace controller)."""
    name = f"t-paused-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    achilles_admin_api.create(agent("paused", adminPaused=True), name)
    cluster.core.delete_namespace(name)

    def gone() -> bool:
        try:
            cluster.core.read_namespace(name)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    wait_for(gone, 60, what="the namespace deleted, its paused Agent with it", interval=0.5)


def test_admin_may_create_an_agent_paused(achilles_admin_api: Achilles, namespace: str) -> None:
    created = achilles_admin_api.create(agent("paused", adminPaused=True), namespace)
    assert created["spec"]["adminPaused"] is True


def test_portal_may_not_curate_models(portal_api: Achilles) -> None:
    status, message = rejection(lambda: portal_api.create(agent_model("portal-model")))
    assert status == 403
    assert 'cannot create resource "agentmodels"' in message


# --- spec.owner is immutable ---


@pytest.mark.parametrize("who", ["portal", "admin"])
def test_owner_cannot_change(
    who: str, portal_api: Achilles, achilles_admin_api: Achilles, namespace: str
) -> None:
    api = portal_api if who == "portal" else achilles_admin_api
    api.create(agent("owned"), namespace)
    status, message = rejection(
        lambda: api.patch("Agent", "owned", {"spec": {"owner": "bob"}}, namespace)
    )
    assert status == 422
    assert "spec.owner" in message
    assert "spec.owner is immutable" in message
    # Everything else still changes.
    api.patch("Agent", "owned", {"spec": {"displayName": "Mine"}}, namespace)


# --- one default AgentModel ---


def test_second_default_model_is_refused(admin_api: Achilles, achilles_release: Release) -> None:
    first, second = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("first", "second"))
    try:
        admin_api.create(agent_model(first, default=True))
        # The policy sees AgentModels through an informer; wait until it sees this one.
        message = wait_for(
            lambda: verdict(
                lambda: admin_api.create(agent_model(second, default=True), dry_run=True)
            ),
            timeout=30,
            what="the single-default policy to see the first default",
        )
        assert f"spec.default: AgentModel {first} is already the default" in message
        admin_api.create(agent_model(second))  # not the default: fine
        admin_api.patch("AgentModel", first, {"spec": {"default": False}})
        wait_for(
            lambda: (
                verdict(lambda: admin_api.patch("AgentModel", second, {"spec": {"default": True}}))
                is None
            ),
            timeout=30,
            what="the default to move to the second model",
        )
    finally:
        admin_api.delete("AgentModel", first)
        admin_api.delete("AgentModel", second)


# --- status: the operator's fields survive the status subresource ---


def test_status_keeps_every_operator_field(
    admin_api: Achilles, achilles_release: Release, namespace: str
) -> None:
    admin_api.create(agent("reported"), namespace)
    status = AgentStatus.model_validate(
        {
            "databaseId": 42,
            "phase": "Ready",
            "conditions": [
                {
                    "type": "Ready", "status": "True", "reason": "AllLocksOpen",
                    "message": "", "lastTransitionTime": "2026-01-05T09:00:00Z",
                    "observedGeneration": 1,
                }
            ],
            "scheduleSummary": "weekly on Monday at 09:00",
            "nextRunAt": "2026-01-12T08:00:00Z",
            "lastRun": {
                "id": 7, "trigger": "scheduled", "state": "failed", "reason": "iteration_cap",
                "startedAt": "2026-01-05T08:00:00Z", "finishedAt": "2026-01-05T08:01:30Z",
                "tokensUsed": 1234,
            },
            "weeklyTokens": {"used": 1234, "limit": 200000, "windowStart": "2026-01-04T00:00:00Z"},
            "observedGeneration": 1,
            "lastHandledRunRequest": "2026-01-05T07:59:00Z",
            "kopf": {"progress": {"create_agent": {"retries": 1}}},
        }
    )  # fmt: skip
    sent = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    stored = admin_api.patch_status("Agent", "reported", sent, namespace)
    assert stored["status"] == sent
    assert AgentStatus.model_validate(stored["status"]) == status
    # The status subresource does not touch spec, and spec writes do not touch status.
    assert stored["spec"]["prompt"] == "Summarise my week."
    again = admin_api.patch("Agent", "reported", {"status": {"phase": "Other"}}, namespace)
    assert again["status"]["phase"] == "Ready"


def test_the_operators_status_patch_merges_and_tells_a_gone_agent(
    admin_api: Achilles, achilles_release: Release, cluster: Cluster, namespace: str
) -> None:
    """`Resources.patch_status` (a merge patch of the status subresource whose answer is
    not decoded): it merges into what is there, says False for an Agent that is gone,
    and raises the API server's refusal of a status the schema does not allow."""
    resources = Resources(cluster.api)
    admin_api.create(agent("patched"), namespace)
    ref = ObjectRef("Agent", "agents", "patched", namespace)
    assert resources.patch_status(ref, {"phase": "Ready", "databaseId": 7})
    assert resources.patch_status(ref, {"phase": "Paused"})
    assert admin_api.get("Agent", "patched", namespace)["status"] == {
        "phase": "Paused",
        "databaseId": 7,
    }
    with pytest.raises(ApiException) as refused:
        resources.patch_status(ref, {"databaseId": "not a number"})
    assert refused.value.status == 422
    assert "databaseId" in str(refused.value.body)
    admin_api.delete("Agent", "patched", namespace)
    gone = ObjectRef("Agent", "agents", "never-made", namespace)
    assert resources.patch_status(gone, {"phase": "Ready"}) is False
