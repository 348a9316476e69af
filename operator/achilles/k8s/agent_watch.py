"""The Agents' list+watch (k8s/watching.py), every namespace at once.

Each Agent stays the API's JSON, handed over whole: the handler (handlers/agents.py)
reads the few fields an event needs from it and lets the rest go.
"""

from __future__ import annotations

from typing import Any

from achilles.k8s.objects import Resources
from achilles.k8s.watching import ListWatch

# Every namespace: `Resources.list_agents` of "".
ALL_NAMESPACES = ""


def _whole(raw: dict[str, Any], deleted: bool) -> dict[str, Any]:
    return raw


def agent_watch(resources: Resources, timeout_seconds: int = 300) -> ListWatch[dict[str, Any]]:
    return ListWatch(resources.list_agents, ALL_NAMESPACES, _whole, timeout_seconds=timeout_seconds)
