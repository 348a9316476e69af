"""The suite: which scenarios exist, in what order they run, and how each is run — its own
namespace and operators, its time measured, its failure recorded rather than raised, and
its clean-up always done, so one broken scenario never hides the others."""

from __future__ import annotations

import os
import platform
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from achilles_chaos.cluster import ChaosCluster
from achilles_chaos.report import Result
from achilles_chaos.scenario import Context
from achilles_chaos.scenarios import (
    bad_input,
    cancel,
    downtime,
    infra,
    operator,
    pods,
    runner,
    triggers,
    webhook,
)
from achilles_chaos.waiting import recording_waits, timed
from achilles_dev.invariants import Verdict

Report = Callable[[str], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Context], None]
    summary: str
    node: str = "containerd"  # every scenario runs its pods on the real node


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("runner-sigkill", runner.runner_sigkill, "runner SIGKILLed x100 in waves"),
    Scenario("runner-sigstop", runner.runner_sigstop, "runner frozen past the stale threshold"),
    Scenario("no-false-stale", runner.no_false_stale, "healthy long runs under CPU and DB stress"),
    Scenario("double-leader", operator.double_leader, "two replicas, 1,000 due agents"),
    Scenario("operator-sigkill", operator.operator_sigkill, "operator SIGKILLed mid-dispatch x10"),
    Scenario("downtime-slots", downtime.downtime_slots, "operator down while slots pass"),
    Scenario("postgres-outage", infra.postgres_outage, "PostgreSQL restarted, away 60 s"),
    Scenario("apiserver-restart", infra.apiserver_restart, "kube-apiserver killed mid-dispatch"),
    Scenario("parallel-triggers", triggers.parallel_triggers, "200 parallel triggers of one agent"),
    Scenario("never-starts", pods.never_starts, "a pod that never starts"),
    Scenario("oom", pods.oom, "a runner OOM-killed by its memory limit"),
    Scenario("run-deadline", pods.run_deadline, "a run hanging past runTimeoutSeconds"),
    Scenario("bad-input", bad_input.bad_input, "bad input at every door"),
    Scenario(
        "cancel-during-dispatch",
        cancel.cancel_during_dispatch,
        "runs cancelled while their Jobs are made",
    ),
    Scenario("webhook-down", webhook.webhook_down, "notification receiver down 10 min"),
)
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
# The subset the test command runs (tests/cluster/test_chaos.py), at --quick sizes.
QUICK_SUBSET = ("runner-sigkill", "runner-sigstop")


def run_suite(
    scenarios: Sequence[Scenario],
    *,
    state_dir: Path,
    keep: bool,
    quick: bool,
    report: Report,
) -> tuple[list[Result], dict[str, object]]:
    """Every scenario of `scenarios` gets a row: one that fails, or breaks the stack, is
    that scenario's FAIL, and the next runs on the stack repaired (or rebuilt)."""
    started = time.monotonic()
    meta: dict[str, object] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "quick": quick,
    }
    cluster: ChaosCluster | None = ChaosCluster.up(state_dir, report)
    meta["stack_seconds"] = round(time.monotonic() - started, 1)
    results: list[Result] = []
    repairs: list[str] = []
    try:
        for scenario in scenarios:
            if cluster is not None and results:
                cluster = fit_for_next(cluster, state_dir, report, repairs)
            if cluster is None:
                results.append(not_run(scenario, "the stack could not be rebuilt", report))
                continue
            results.append(run_one(scenario, cluster, quick=quick, report=report))
    finally:
        if cluster is not None:
            cluster.down(keep=keep)
    meta["total_seconds"] = round(time.monotonic() - started, 1)
    meta["cores"] = os.cpu_count()
    meta["stack_repairs"] = repairs
    return results, meta


def fit_for_next(
    cluster: ChaosCluster, state_dir: Path, report: Report, repairs: list[str]
) -> ChaosCluster | None:
    """The stack as the next scenario needs it: as it is when nothing is down; else with
    what is down started again; else rebuilt from nothing (each noted in `repairs`).
    None when even that fails."""
    found = _fault(cluster)
    if found is None:
        return cluster
    report(f"--- the stack after the last scenario: {found}; starting what is down")
    try:
        cluster.repair()
        fault = _fault(cluster)
    except Exception as error:
        fault = f"{type(error).__name__}: {error}"
        report(traceback.format_exc())
    if fault is None:
        repairs.append(f"repaired ({found})")
        return cluster
    report(f"--- the stack could not be repaired ({fault}); rebuilding it")
    repairs.append(f"rebuilt ({found}; repair: {fault})")
    try:
        cluster.down(keep=False)
    except Exception:
        report(traceback.format_exc())
    try:
        return ChaosCluster.up(state_dir, report)
    except Exception:
        report(traceback.format_exc())
        return None


def _fault(cluster: ChaosCluster) -> str | None:
    try:
        return cluster.fault()
    except Exception as error:
        return f"{type(error).__name__}: {error}"


def not_run(scenario: Scenario, why: str, report: Report) -> Result:
    result = Result(scenario=scenario.name, node=scenario.node, failures=[f"not run: {why}"])
    report(f"FAIL {scenario.name}: not run: {why}")
    return result


def run_one(scenario: Scenario, cluster: ChaosCluster, *, quick: bool, report: Report) -> Result:
    """One scenario, under the seed's invariant monitor from its set-up to the end of its
    clean-up: whatever it injects, a violation is its failure (issue 36 item 10)."""
    result = Result(scenario=scenario.name, node=scenario.node)
    report(f"--- {scenario.name}: {scenario.summary}")
    started = time.monotonic()
    monitor = cluster.invariant_monitor().start()
    with recording_waits() as waited:
        context: Context | None = None
        try:
            context = Context(cluster, result, quick)
            scenario.run(context)
        except Exception as error:
            what = "" if context is not None else "set-up failed: "
            result.failures.append(f"{what}{type(error).__name__}: {error}")
            report(traceback.format_exc())
        finally:
            try:
                if context is not None:
                    with timed("clean-up"):
                        context.cleanup()
            except Exception as error:
                result.failures.append(f"clean-up failed: {type(error).__name__}: {error}")
                report(traceback.format_exc())
    watched(result, monitor.stop(), report)
    result.passed = not result.failures
    result.seconds = time.monotonic() - started
    # The machine is shared: its load says how much of the time was the scenario's own.
    result.figures["load_average_1m_5m_15m"] = [round(x, 1) for x in os.getloadavg()]
    # Where the time went: the steps of a second or more, longest first.
    slow = sorted(
        ((what, int(n), round(s, 1)) for what, (n, s) in waited.items() if s >= 1),
        key=lambda step: -step[2],
    )
    result.figures["time_by_step"] = {what: {"count": n, "seconds": s} for what, n, s in slow}
    verdict = "PASS" if result.passed else "FAIL"
    report(f"{verdict} {scenario.name} ({result.seconds:.0f}s): {result.figure}")
    for what, n, seconds in slow[:6]:
        report(f"  {seconds:6.1f}s  {what}" + (f" (x{n})" if n > 1 else ""))
    for failure in result.failures:
        report(f"  failure: {failure}")
    return result


def watched(result: Result, verdict: Verdict, report: Report) -> None:
    """The monitor's verdict in the scenario's row: its figures, and each violation a
    failure listed under the table like any other."""
    result.figures["invariants"] = {
        "samples": verdict.samples,
        "failed_samples": verdict.failed_samples,
        "sample_ms_median": verdict.sample_ms_median,
        "sample_ms_max": verdict.sample_ms_max,
        "most_pods_running": verdict.most_pods,
        "violations": verdict.violations,
    }
    report(f"  {verdict.line()}")
    result.failures.extend(f"invariant broken: {violation}" for violation in verdict.violations)
