"""The fault suite's quick subset (`achilles chaos --quick`), so that the scenarios cannot rot
and the two core guarantees are checked by every `make test`: runners SIGKILLed are failed
through their pods and run again, and a runner frozen past the stale threshold is reaped and,
thawed, writes nothing. It runs on a stack of the suite's own (real node, PostgreSQL, the
chart), which it removes. The whole suite is `make chaos` (docs/reliability.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from achilles_chaos.report import table
from achilles_chaos.suite import QUICK_SUBSET, run_suite
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, external_kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]


@pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root")
def test_the_quick_fault_subset_passes_and_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if external_kubeconfig() is not None:
        pytest.skip(
            f"the suite injects faults into a stack of its own; {EXTERNAL_KUBECONFIG} is set"
        )
    state_dir: Path = tmp_path_factory.mktemp("chaos") / "stack"
    progress: list[str] = []
    results, _ = run_suite(
        QUICK_SUBSET, state_dir=state_dir, keep=False, quick=True, report=progress.append
    )
    assert [r.scenario for r in results] == list(QUICK_SUBSET)
    failed = [r for r in results if not r.passed]
    assert not failed, table(results) + "\n" + "\n".join(progress[-40:])
    assert not state_dir.exists(), "the suite's stack was not removed"
