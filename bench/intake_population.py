"""The Agents `achilles bench intake` makes (bench/intake.py), and what happens to them
while no operator runs, as during a deployment: CHANGED_FRACTION get a new prompt (a new
generation), DELETED_FRACTION are deleted and ADDED_FRACTION are created, each touched
one labelled so the bench checks it first (bench/intake_checks.py)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from bench.cluster import GROUP, VERSION, BenchCluster, ensure_namespace
from bench.intake_checks import NEW_PROMPT, TOUCHED_LABEL, Population
from bench.report import Progress
from bench.steady import MODEL, _namespace, _schedule
from bench.workload import agent_manifest, create_all

CHANGED_FRACTION = 0.05
DELETED_FRACTION = 0.01
ADDED_FRACTION = 0.01


def _create(cluster: BenchCluster, item: tuple[str, dict[str, Any]]) -> tuple[str, str]:
    namespace, manifest = item
    created = cast(
        dict[str, Any],
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "agents", manifest
        ),
    )
    return manifest["metadata"]["name"], str(created["metadata"]["uid"])


def create_agents(
    cluster: BenchCluster,
    population: Population,
    indexes: range,
    owners: int,
    progress: Progress,
    labels: dict[str, str] | None = None,
) -> float:
    """Create Agents `indexes`; the seconds it took."""
    now = datetime.now(UTC)
    for namespace in sorted({_namespace(i) for i in indexes}):
        ensure_namespace(cluster, namespace)
    items = []
    for i in indexes:
        manifest = agent_manifest(f"agent-{i}", f"owner-{1 + i % owners}", MODEL, _schedule(i, now))
        if labels:
            manifest["metadata"]["labels"] = labels
        items.append((_namespace(i), manifest))
    made: list[tuple[str, str]] = []

    def create(item: tuple[str, dict[str, Any]]) -> None:
        made.append(_create(cluster, item))

    took = create_all(items, create, progress, "Agents")
    for name, uid in made:
        population.agents[name] = (_namespace(int(name.removeprefix("agent-"))), uid)
    return took


def move_on(
    cluster: BenchCluster, population: Population, size: int, owners: int, progress: Progress
) -> None:
    """What happens while no operator runs: prompts changed, Agents deleted and added."""
    rng = random.Random(20)
    names = sorted(population.agents)
    picked = rng.sample(names, math.ceil(size * (CHANGED_FRACTION + DELETED_FRACTION)))
    split = math.ceil(size * CHANGED_FRACTION)
    population.changed, deleted = sorted(picked[:split]), sorted(picked[split:])
    patch = {"metadata": {"labels": {TOUCHED_LABEL: "yes"}}, "spec": {"prompt": NEW_PROMPT}}

    def change(name: str) -> None:
        namespace, _ = population.agents[name]
        cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "agents", name, patch
        )

    def delete(name: str) -> None:
        namespace, _ = population.agents[name]
        try:
            cluster.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "agents", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    create_all(population.changed, change, progress, "Agents changed")
    create_all(deleted, delete, progress, "Agents deleted")
    for name in deleted:
        population.deleted[name] = population.agents.pop(name)[1]
    added = range(size, size + math.ceil(size * ADDED_FRACTION))
    create_agents(cluster, population, added, owners, progress, {TOUCHED_LABEL: "yes"})
    population.added = [f"agent-{i}" for i in added]
