"""`make test` on two pytest-xdist workers: the tests on the session's clusters as one unit
of work, the database, API and browser tiers as another, and each module with stacks of
its own as one more, which the first worker free takes.

The session's cluster (a control plane with a real node, `make dev`'s) is the costliest
server a worker can start, and most of its tests wait on it, so one worker takes them
all; the other overlaps that wait with the tests that use no session cluster: the
database, API and browser tiers, and the modules with stacks of their own (the
benchmarks, the fault suite, `achilles dev`, the API's chart), which also go to the
first worker done. Each worker starts only the session servers its own tests use.

xdist's `--dist loadgroup` reads `xdist_group` marks by renaming each item's node id,
which pytest 9 no longer allows (xdist 3.8 still sets `_nodeid`; the id moved), so the
groups are given by module here, to a scheduler of the kind xdist documents: its
`LoadScopeScheduling` with our own `_split_scope`. `check_groups` refuses, at
collection, a test on a session cluster in a module the other worker runs.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

SESSION_CLUSTERS = "session-clusters"
THE_REST = "the-rest"

# Modules under tests/cluster whose tests start stacks of their own and use no session
# cluster, so they run beside it.
OWN_STACKS = frozenset(
    {
        "tests/cluster/test_bench_cluster.py",
        "tests/cluster/test_chaos.py",
        "tests/cluster/test_dev_demo.py",
        "tests/cluster/test_dev_stack.py",
        "tests/cluster/install/test_api_chart.py",
    }
)
SESSION_CLUSTER_FIXTURES = frozenset({"cluster", "node_cluster"})


def group_of(nodeid: str) -> str:
    """The unit of work `nodeid` belongs to: a module of OWN_STACKS is a unit of its own,
    so that whichever worker is free first takes it."""
    module = nodeid.partition("::")[0]
    if module in OWN_STACKS:
        return module
    if module.startswith("tests/cluster/"):
        return SESSION_CLUSTERS
    return THE_REST


class TwoGroups(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
    """One work unit per group (`group_of`); xdist hands out the largest first and the
    next to the first worker that is nearly done."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)


def check_groups(items: list[pytest.Item]) -> None:
    # The session clusters are fixtures of tests/cluster/conftest.py, seen only there (a
    # `cluster` elsewhere is another fixture of that name).
    strays = [
        item.nodeid
        for item in items
        if item.nodeid.startswith("tests/cluster/")
        and SESSION_CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
        and group_of(item.nodeid) != SESSION_CLUSTERS
    ]
    if strays:
        raise pytest.UsageError(
            "these tests use a session cluster but their modules are in tests/workers.py's"
            f" OWN_STACKS, so a second worker would start the clusters too: {strays}"
        )
