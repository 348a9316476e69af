"""The list+watch of a kind of ours (k8s/watching.py), every namespace at once: the
Agents, and the cluster-scoped AgentModels, AgentTools and AgentPlatforms.

Each object stays the API's JSON, handed over whole: the handlers (handlers/agents.py,
handlers/catalogue.py) read the few fields an event needs from it and let the rest go.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from achilles.k8s.objects import Resources
from achilles.k8s.resources.kinds import CustomResourceKind
from achilles.k8s.watching import ListWatch

# Every namespace (and a cluster-scoped kind's only scope): `Resources.list_objects` of "".
ALL_NAMESPACES = ""


def _whole(raw: dict[str, Any], deleted: bool) -> dict[str, Any]:
    return raw


def custom_watch(
    resources: Resources, kind: CustomResourceKind, timeout_seconds: int = 300
) -> ListWatch[dict[str, Any]]:
    call = partial(resources.list_objects, kind.plural)
    return ListWatch(call, ALL_NAMESPACES, _whole, timeout_seconds=timeout_seconds)
