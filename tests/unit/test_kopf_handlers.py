"""What the operator registers with kopf: its activities (the start-up that starts the
runtime, the clean-up that stops it) and the liveness probe, and no resource handler.
Every kind is a list+watch of the runtime's (handlers/manager.py), so kopf keeps no
per-object state (a diff base, a memory of each object, a worker per object) that the
operator's settings would have to account for: this fails first if one is registered.
"""

from __future__ import annotations

import kopf

import achilles.handlers  # noqa: F401  (registers the activities on kopf's default registry)
from achilles.handlers.operator import configure, loops_health, shutdown


def test_kopf_runs_the_activities_and_the_probe_and_watches_no_resource() -> None:
    registry = kopf.get_default_registry()
    # kopf has no public reader of its registries; these are the ones its processing reads.
    for resource_handlers in (
        registry._watching,
        registry._changing,
        registry._spawning,
        registry._indexing,
        registry._webhooks,
    ):
        assert list(resource_handlers.get_all_handlers()) == []
    ours = {
        handler.fn
        for handler in registry._activities.get_all_handlers()
        if handler.fn.__module__.startswith("achilles.")  # kopf's own: its logins
    }
    assert ours == {configure, shutdown, loops_health}
