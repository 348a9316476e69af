"""The list+watch of our kinds (k8s/custom_watch.py; kopf watches none of them): one
listing of every namespace (or of a cluster-scoped kind), in pages, then the watch hands
over what changes (ADDED, MODIFIED, DELETED, each as the API's JSON), and a watch that
ends resumes where it was without listing again. On the real API server with the
chart's CRDs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from achilles.k8s.custom_watch import custom_watch
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.kinds import AGENT, AGENT_MODEL
from achilles.k8s.watching import Change, Page
from tests.cluster.conftest import Cluster
from tests.cluster.install.api import Achilles
from tests.cluster.install.conftest import Release
from tests.crd_cases import agent, agent_model
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0


@pytest.fixture
def other_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-agent-watch-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    cluster.core.delete_namespace(name)


def _where(body: dict[str, Any]) -> tuple[str, str]:
    return body["metadata"]["namespace"], body["metadata"]["name"]


def test_the_agent_watch_lists_every_namespace_then_follows_the_changes(
    admin_api: Achilles,
    achilles_release: Release,
    cluster: Cluster,
    namespace: str,
    other_namespace: str,
) -> None:
    ours = {namespace, other_namespace}
    admin_api.create(agent("a1"), namespace)
    admin_api.create(agent("a2"), namespace)
    admin_api.create(agent("b1"), other_namespace)
    watch = custom_watch(Resources(cluster.api), AGENT, timeout_seconds=1)
    watch.page_size = 2  # three Agents of ours at least (other tests' too): two pages or more

    listed = list(watch.follow())
    pages = [item for item in listed if isinstance(item, Page)]
    assert len(pages) >= 2
    assert pages[0].first
    assert pages[-1].last
    bodies = [body for page in pages for body in page.items]
    assert {_where(b) for b in bodies if b["metadata"]["namespace"] in ours} == {
        (namespace, "a1"),
        (namespace, "a2"),
        (other_namespace, "b1"),
    }
    assert all("spec" in b and "uid" in b["metadata"] for b in bodies)  # whole, the API's JSON

    admin_api.create(agent("a3"), namespace)
    b1 = ObjectRef("Agent", "agents", "b1", other_namespace)
    assert Resources(cluster.api).patch_status(b1, {"phase": "Ready", "databaseId": 1})
    admin_api.delete("Agent", "a1", namespace)
    seen: set[tuple[str, str, str]] = set()
    expected = {
        ("ADDED", namespace, "a3"),
        ("MODIFIED", other_namespace, "b1"),
        ("DELETED", namespace, "a1"),
    }

    def all_seen() -> bool:
        again = list(watch.follow())  # one more pass: its watch ends after a second
        assert not any(isinstance(item, Page) for item in again), "a resumed watch listed"
        for change in again:
            assert isinstance(change, Change)
            if change.item["metadata"]["namespace"] in ours:
                seen.add((change.type, *_where(change.item)))
        return expected <= seen

    wait_for(all_seen, TIMEOUT, what="the three changes from the resumed watch")
    assert ("ADDED", namespace, "a1") not in seen  # nothing known comes again as ADDED
    assert (watch.counts.lists, watch.counts.expired) == (1, 0)


def test_a_cluster_scoped_kind_is_listed_then_watched(
    admin_api: Achilles, achilles_release: Release, cluster: Cluster
) -> None:
    name = f"t-watch-{uuid.uuid4().hex[:6]}"
    admin_api.create(agent_model(name, model=name))
    try:
        watch = custom_watch(Resources(cluster.api), AGENT_MODEL, timeout_seconds=1)
        listed = [item for item in watch.follow() if isinstance(item, Page)]
        assert listed[-1].last
        names = {body["metadata"]["name"] for page in listed for body in page.items}
        assert name in names
        assert all("namespace" not in body["metadata"] for page in listed for body in page.items)

        admin_api.patch("AgentModel", name, {"spec": {"model": f"{name}-2"}})
        admin_api.delete("AgentModel", name)
        seen: list[tuple[str, str]] = []

        def both_seen() -> bool:
            for change in watch.follow():
                assert isinstance(change, Change), "a resumed watch listed"
                if change.item["metadata"]["name"] == name:
                    seen.append((change.type, change.item["spec"]["model"]))
                    # (the operator's own status writes of it come as MODIFIED too)
            return ("DELETED", f"{name}-2") in seen

        wait_for(both_seen, TIMEOUT, what="the model's change and deletion from the watch")
        assert ("MODIFIED", f"{name}-2") in seen
        assert (watch.counts.lists, watch.counts.expired) == (1, 0)
    finally:
        admin_api.delete("AgentModel", name)
