"""The fault suite's quick subset (`achilles chaos --quick`), so that the scenarios cannot rot
and the two core guarantees are checked by every `make test`: runners SIGKILLed are failed
through their pods and run again, and a runner frozen past the stale threshold is reaped and,
thawed, writes nothing; the seed's invariant monitor watched each and saw no violation. It
runs on a stack of the suite's own (real node, PostgreSQL, the chart), which it removes.
The whole suite is `make chaos` (docs/reliability.md).

Before them runs a scenario that breaks the stack and fails, clean-up included: it is
reported as its own FAIL, and the quick subset runs after it on the stack repaired."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from achilles_chaos.report import table
from achilles_chaos.scenario import Context
from achilles_chaos.suite import BY_NAME, QUICK_SUBSET, Scenario, run_suite
from tests.cluster.conftest import EXTERNAL_KUBECONFIG, external_kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]


def _kill_the_api_server_and_fail(ctx: Context) -> None:
    ctx.cluster.kill_apiserver()
    raise RuntimeError("this scenario breaks the stack on purpose")


BREAKS_THE_STACK = Scenario(
    "breaks-the-stack", _kill_the_api_server_and_fail, "kills the API server, then fails"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root")
def test_the_quick_fault_subset_passes_after_a_broken_scenario_and_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if external_kubeconfig() is not None:
        pytest.skip(
            f"the suite injects faults into a stack of its own; {EXTERNAL_KUBECONFIG} is set"
        )
    state_dir: Path = tmp_path_factory.mktemp("chaos") / "stack"
    progress: list[str] = []
    scenarios = [BREAKS_THE_STACK, *(BY_NAME[name] for name in QUICK_SUBSET)]
    results, meta = run_suite(
        scenarios, state_dir=state_dir, keep=False, quick=True, report=progress.append
    )
    assert [r.scenario for r in results] == [s.name for s in scenarios]
    broken, *quick = results
    assert not broken.passed
    assert broken.failures[0] == "RuntimeError: this scenario breaks the stack on purpose"
    assert any(f.startswith("clean-up failed: ") for f in broken.failures), broken.failures
    assert meta["stack_repairs"] == ["repaired (not running: kube-apiserver)"], meta
    failed = [r for r in quick if not r.passed]
    assert not failed, table(results) + "\n" + "\n".join(progress[-40:])
    # The seed's invariants were watched through each scenario and held (issue 36 item 10).
    for result in quick:
        watched = result.figures["invariants"]
        assert watched["samples"] > 0, (result.scenario, watched)
        assert watched["violations"] == [], (result.scenario, watched)
        # Its pod side saw the scenario's runners.
        assert watched["most_pods_running"] > 0, (result.scenario, watched)
    assert not state_dir.exists(), "the suite's stack was not removed"
